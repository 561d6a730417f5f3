package calibrate

import (
	"encoding/json"
	"net/http"
	"strconv"
)

func decode(r *http.Request, v any) { _ = json.NewDecoder(r.Body).Decode(v) }

func itoa(n int) string { return strconv.Itoa(n) }
