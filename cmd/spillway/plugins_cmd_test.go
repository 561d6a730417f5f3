package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestPluginsListsTypesWithDefaults(t *testing.T) {
	var out bytes.Buffer
	if err := listPlugins(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"max-score-picker\n  defaults: {\"maxNumOfEndpoints\":1}",
		"round-robin-picker\n",
		"label-selector-filter\n  (needs parameters:",
		"decode-filter\n  no parameters",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("plugins output lacks %q:\n%s", want, s)
		}
	}
}
