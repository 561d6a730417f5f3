package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// The README's YAML examples must load as written.
func TestReadmeExamplesLoad(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 2 {
		t.Fatalf("README has %d YAML examples, want the endpoints file and a picker config", len(blocks))
	}
	for i, b := range blocks {
		switch {
		case strings.HasPrefix(b[1], "endpoints:"):
			if _, err := discovery.ParseEndpoints("README example", []byte(b[1])); err != nil {
				t.Errorf("example %d: %v", i, err)
			}
		case strings.Contains(b[1], "EndpointPickerConfig"):
			s, err := profiles.LoadConfigBytes("README example", []byte(b[1]), profiles.Options{})
			if err != nil {
				t.Errorf("example %d: %v", i, err)
				continue
			}
			s.Close()
		default:
			t.Errorf("example %d is neither an endpoints file nor a picker config", i)
		}
	}
}
