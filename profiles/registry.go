package profiles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Factory builds a plugin from its config entry. params is the plugin's
// `parameters` as JSON (nil when absent); decode it with DecodeParams.
type Factory func(name string, params json.RawMessage, h Handle) (Plugin, error)

// Handle gives factories and plugins access to the scheduler's shared
// services.
type Handle interface {
	// Plugin returns another plugin of the same config by name. During
	// construction only plugins listed earlier exist; use Binder to refer
	// to any plugin.
	Plugin(name string) (Plugin, bool)
	// Plugins returns every plugin built so far, in config order.
	Plugins() []Plugin
	Clock() Clock
	Registerer() prometheus.Registerer
	// Context lives as long as the scheduler; background work started by
	// plugins must stop when it is done.
	Context() context.Context
	// ConfigDir is the directory of the config file, for relative paths.
	ConfigDir() string
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a plugin type available to config files. It panics on a
// duplicate type: that is a programming error caught at init.
func Register(pluginType string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[pluginType]; dup {
		panic("profiles: plugin type registered twice: " + pluginType)
	}
	registry[pluginType] = f
}

// Lookup returns the factory of a plugin type.
func Lookup(pluginType string) (Factory, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	f, ok := registry[pluginType]
	return f, ok
}

// RegisteredTypes returns every registered plugin type, sorted.
func RegisteredTypes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// DecodeParams strictly decodes a plugin's parameters into dst, a pointer to
// a struct with json tags that already holds the defaults. Unknown fields
// and wrong types are errors naming the field and the accepted fields.
func DecodeParams(params json.RawMessage, dst any) error {
	if len(bytes.TrimSpace(params)) == 0 || string(bytes.TrimSpace(params)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		return nil
	}
	accepted := AcceptedFields(dst)
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		return fmt.Errorf("parameter %q: got JSON %s, want %s (accepted parameters: %s)", te.Field, te.Value, jsonKind(te.Type), accepted)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return fmt.Errorf("unknown parameter %s (accepted parameters: %s)", field, accepted)
	default:
		return fmt.Errorf("parameters: %v (accepted parameters: %s)", err, accepted)
	}
}

// AcceptedFields lists a parameter struct's json fields with their kinds,
// e.g. "affinityThreshold (number), ttftSource (string)".
func AcceptedFields(dst any) string {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return jsonKind(t)
	}
	var parts []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if !f.IsExported() {
				continue
			}
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", name, jsonKind(f.Type)))
		}
	}
	walk(t)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t.String() == "time.Duration" || t == reflect.TypeOf(Duration(0)) {
			return "duration"
		}
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.String()
}
