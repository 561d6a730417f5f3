package profiles

import (
	"context"
	"encoding/json"
)

// SingleProfileHandler runs the config's one profile; its pick is the
// destination.
type SingleProfileHandler struct{ Named }

func init() {
	Register("single-profile-handler", func(name string, params json.RawMessage, h Handle) (Plugin, error) {
		var p struct{}
		if err := DecodeParams(params, &p); err != nil {
			return nil, err
		}
		return &SingleProfileHandler{NewNamed("single-profile-handler", name)}, nil
	})
}

// Handle implements ProfileHandler.
func (s *SingleProfileHandler) Handle(ctx context.Context, req *Request, run ProfileRunner) (*Result, error) {
	names := run.Profiles()
	if len(names) != 1 {
		return nil, &StatusError{Code: 500, Message: "single-profile-handler needs exactly one profile"}
	}
	pr, err := run.Run(ctx, names[0], req)
	if err != nil {
		return nil, err
	}
	return &Result{Primary: names[0], Profiles: map[string]*ProfileResult{names[0]: pr}}, nil
}
