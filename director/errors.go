package director

import (
	"encoding/json"
	"net/http"
)

// ErrorBody renders an error in the OpenAI error shape:
// {"error":{"message":..,"type":..,"param":null,"code":<status>}}.
func ErrorBody(status int, message string) []byte {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	b, err := json.Marshal(struct {
		Error body `json:"error"`
	}{body{Message: message, Type: errorType(status), Code: status}})
	if err != nil { // cannot happen for these types
		return []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":500}}`)
	}
	return b
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	default:
		return "server_error"
	}
}
