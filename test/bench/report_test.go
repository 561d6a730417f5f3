package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/test/workloads"
)

const chromium = "/usr/bin/chromium"

func quickResults(t *testing.T, workload string, configs ...string) *Results {
	t.Helper()
	spec, err := workloads.Load(workload)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := LoadFleet(spec.Fleet)
	if err != nil {
		t.Fatal(err)
	}
	var cs []*Config
	for _, n := range configs {
		c, err := LoadConfig(n)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	res, err := Run(context.Background(), Options{Workload: spec, Fleet: fl, Configs: cs})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReportDrawsChartsInChromium opens report.html in headless Chromium and
// checks, in the DOM after the page's script ran, that every chart has one
// line per configuration.
func TestReportDrawsChartsInChromium(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skipping: %s not installed (Debian: apt-get install -y chromium)", chromium)
	}
	res := quickResults(t, "b2b-saas-quick", "k8-round-robin")
	// a second line per chart: the same results under another name
	second := res.Configs[0]
	second.Name = "k8-round-robin-copy"
	res.Configs = append(res.Configs, second)
	dir := t.TempDir()
	report, err := res.WriteDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", "file://"+report)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	dom := out.String()
	if !strings.Contains(dom, `data-rendered="true"`) {
		t.Fatalf("report script did not finish; DOM:\n%.2000s", dom)
	}
	charts := strings.Count(dom, "data-chart=")
	lines := strings.Count(dom, `class="series"`)
	if charts != 4 || lines != 4*2 {
		t.Fatalf("drew %d charts with %d lines, want 4 charts × 2 configurations", charts, lines)
	}
	if !strings.Contains(dom, `<path d="M`) || !strings.Contains(dom, `class="knee"`) {
		t.Fatal("no line paths or knee markers in the drawn SVG")
	}
	if strings.Contains(dom, "http://") && strings.Contains(dom, "<script src") {
		t.Fatal("report loads external scripts")
	}
}

func TestReportIsSelfContained(t *testing.T) {
	res := quickResults(t, "reasoning-quick", "k8-round-robin")
	var b bytes.Buffer
	if err := res.WriteReport(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	for _, bad := range []string{"<script src", "<link ", "https://", "{{"} {
		if strings.Contains(h, bad) {
			t.Errorf("report contains %q", bad)
		}
	}
	if !strings.Contains(h, `"name":"reasoning-quick"`) {
		t.Error("results not inlined")
	}
	back, err := func() (*Results, error) {
		dir := t.TempDir()
		if _, err := res.WriteDir(dir); err != nil {
			return nil, err
		}
		return ReadResults(filepath.Join(dir, "results.json"))
	}()
	if err != nil || len(back.Configs) != 1 || back.Configs[0].Levels[0].Requests != res.Configs[0].Levels[0].Requests {
		t.Fatalf("results.json round trip: %v", err)
	}
}
