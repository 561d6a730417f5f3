package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/tokenproducer"
)

func init() { subcommands = append(subcommands, newTokensCmd) }

func newTokensCmd() *cobra.Command {
	var model, config, endpoint, backend, family string
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Count a request's prompt tokens (text and images) as the token producer would",
		Long: `tokens reads one OpenAI-compatible request body (chat completions, completions
or responses) from stdin and prints the token producer's breakdown as JSON:
text_tokens (including the chat-template wrapper tokens of images),
image_tokens, one entry per image, video or audio item {kind, width, height,
tokens, default_resolution, hash}, total, weighted (text + image ×
imageTokenCost), the text backend used and the image formula family.

Settings come from the first token-producer plugin of --config (an
EndpointPickerConfig), else the defaults: estimate backend (~4 bytes per
token), image family from the model name. Image sizes are read from the
headers of data: URLs; remote URLs count at estimate.image.defaultResolution
unless remoteFetch is enabled in the config. Compare the result with the
usage.prompt_tokens your served model reports for the same request.

A malformed image exits with the same precise message the front door would
answer with HTTP 400 (unless the config says onImageError: default).`,
		Example: `  spillway tokens --model Qwen/Qwen3-VL-32B-Instruct < request.json
  spillway tokens --model Qwen/Qwen3-VL-32B-Instruct --config epp.yaml < request.json
  spillway tokens --model Qwen/Qwen3-32B --backend model-server --endpoint http://127.0.0.1:8000 < request.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p tokenproducer.Params
			if config != "" {
				var err error
				if p, err = tokenproducer.ParamsFromConfig(config); err != nil {
					return err
				}
			}
			if backend != "" {
				p.Backend = backend
			}
			if family != "" {
				p.Family = family
			}
			if endpoint != "" {
				p.ModelServer.URL = endpoint
			}
			if p.Backend == tokenproducer.BackendModelServer && p.ModelServer.URL == "" {
				return errors.New("the model-server backend needs --endpoint (or modelServer.url in the config)")
			}
			c, err := tokenproducer.New(p, nil)
			if err != nil {
				return fmt.Errorf("token-producer parameters: %w", err)
			}
			body, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<30))
			if err != nil {
				return fmt.Errorf("reading the request from stdin: %w", err)
			}
			b, err := c.Explain(cmd.Context(), body, model)
			if err != nil {
				return err
			}
			if b.Model == "" {
				return errors.New("no model: pass --model or set \"model\" in the body")
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(b)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "served model name (replaces the body's \"model\"); picks the image family by name")
	f.StringVar(&config, "config", "", "EndpointPickerConfig file whose token-producer parameters to use")
	f.StringVar(&backend, "backend", "", "text backend: estimate, tiktoken or model-server (overrides the config)")
	f.StringVar(&family, "family", "", "image formula: qwen2-vl, qwen2.5-vl, qwen3-vl, llava-1.5, llava-next or estimate (overrides the config and the model name)")
	f.StringVar(&endpoint, "endpoint", "", "model server base URL for the model-server backend, e.g. http://127.0.0.1:8000")
	return cmd
}
