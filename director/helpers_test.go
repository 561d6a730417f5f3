package director_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-llm/spillway/director/directortest"
)

// counterValue reads a counter series with code=code from the env's registry.
func counterValue(t *testing.T, env *directortest.Env, name, code string) float64 {
	t.Helper()
	for _, m := range family(t, env, name).GetMetric() {
		if hasLabel(m, "code", code) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func family(t *testing.T, env *directortest.Env, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func requestsTotal(t *testing.T, env *directortest.Env, code string) float64 {
	return counterValue(t, env, "spillway_requests_total", code)
}

func errorsTotal(t *testing.T, env *directortest.Env, code string) float64 {
	return counterValue(t, env, "spillway_request_errors_total", code)
}
