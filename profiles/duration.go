package profiles

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a plugin parameter written as a Go duration string ("250ms",
// "10m") or as a number of seconds.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %v (e.g. \"250ms\", \"10m\")", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("duration: want a string like \"250ms\" or a number of seconds, got %s", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
