package bench

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"
)

//go:embed report.html.tmpl
var reportTemplate string

// WriteReport renders a self-contained HTML report: the results are inlined
// as JSON and a small script draws the charts as inline SVG (no network, no
// CDN), so the file can be mailed around or opened from disk.
func (r *Results) WriteReport(w io.Writer) error {
	js, err := json.Marshal(r) // escapes <, > and & so the JSON is safe in <script>
	if err != nil {
		return fmt.Errorf("encoding results for the report: %w", err)
	}
	title := fmt.Sprintf("spillway bench: %s on %s", r.Workload.Name, r.Fleet.Name)
	out := strings.NewReplacer(
		"{{TITLE}}", html.EscapeString(title),
		"{{RESULTS}}", string(js),
	).Replace(reportTemplate)
	_, err = io.WriteString(w, out)
	return err
}
