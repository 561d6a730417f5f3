package main

import (
	"bytes"
	"strings"
	"testing"
)

// Bad flags are errors before anything listens.
func TestSidecarCmdRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "0"}, "--port"},
		{[]string{"--port", "18000", "--decoder", "ftp://x"}, "decoder"},
		{[]string{"--port", "18000", "--allow", "no-port"}, "allow-list entry"},
		{[]string{"--port", "18000", "--allow-file", "/nonexistent/endpoints.yaml"}, "--allow-file"},
	} {
		cmd := newSidecarCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(tc.args)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
	var out bytes.Buffer
	cmd := newSidecarCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "x-prefiller-host-port") || !strings.Contains(out.String(), "--allow-file") {
		t.Errorf("help: %v\n%s", err, out.String())
	}
}
