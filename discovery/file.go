package discovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/spillway-llm/spillway/profiles"
)

// DefaultPollInterval is how often a FileSource re-reads its file.
const DefaultPollInterval = time.Second

// endpointsFile is the static endpoints file format.
type endpointsFile struct {
	Endpoints *[]Spec `json:"endpoints"`
}

// FileSource reads endpoints from a YAML file and re-reads it when its
// content changes. It polls (rather than watching with inotify) because
// Kubernetes ConfigMap volumes replace files by swapping symlinks, which
// watchers on the file itself miss; reading a small file once a second is
// cheap.
type FileSource struct {
	path string

	// PollInterval is how often the file is re-read; DefaultPollInterval
	// when zero. Set before Run.
	PollInterval time.Duration
	// Logger receives reload errors; slog.Default() when nil. Set before Run.
	Logger *slog.Logger

	reloadErrors prometheus.Counter
}

// NewFileSource returns a source for the endpoints file at path.
func NewFileSource(path string) *FileSource {
	return &FileSource{
		path: path,
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: profiles.MetricsNamespace, Name: "endpoints_reload_errors_total",
			Help: "Edits of the endpoints file that could not be applied (the last good set stays in use).",
		}),
	}
}

// Register exposes the source's metrics on reg. Call it before Run.
func (f *FileSource) Register(reg prometheus.Registerer) {
	f.reloadErrors = profiles.RegisterCollector(reg, f.reloadErrors)
}

// Path returns the file the source reads.
func (f *FileSource) Path() string { return f.path }

// Run implements Source. A file that cannot be read or parsed at start is an
// error (the picker must not start with a guessed pool); a later broken edit
// keeps the last good set, logs the error and counts it in
// spillway_endpoints_reload_errors_total until the file is fixed.
func (f *FileSource) Run(ctx context.Context, sink Sink) error {
	interval := f.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("endpoints file: %w", err)
	}
	specs, err := ParseEndpoints(f.path, data)
	if err != nil {
		return err
	}
	sink.Update(specs)
	// seen is the hash of the last content acted on, good or bad, so that a
	// broken file is reported once rather than every poll.
	seen := sha256.Sum256(data)
	var readErr string
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			// Editors and ConfigMap updates replace files; a missing file
			// for one poll is not a reason to drop every endpoint.
			if err.Error() != readErr {
				readErr = err.Error()
				f.reloadErrors.Inc()
				log.Error("endpoints file unreadable; keeping the last good endpoint set", "file", f.path, "err", err)
			}
			continue
		}
		readErr = ""
		h := sha256.Sum256(data)
		if h == seen {
			continue
		}
		seen = h
		specs, err := ParseEndpoints(f.path, data)
		if err != nil {
			f.reloadErrors.Inc()
			log.Error("endpoints file edit rejected; keeping the last good endpoint set", "err", err)
			continue
		}
		log.Info("endpoints file reloaded", "file", f.path, "endpoints", len(specs))
		sink.Update(specs)
	}
}

// LoadEndpointsFile reads and validates an endpoints file.
func LoadEndpointsFile(path string) ([]Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("endpoints file: %w", err)
	}
	return ParseEndpoints(path, data)
}

// ParseEndpoints decodes an endpoints document strictly and validates it:
// every entry needs a unique name and a host:port address. file names the
// document in errors.
func ParseEndpoints(file string, data []byte) ([]Spec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: empty file (want `endpoints:` with a list of {name, address, labels}; `endpoints: []` for none)", file)
	}
	var doc endpointsFile
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %v (accepted: endpoints: [{name, address, labels}])", file, err)
	}
	if doc.Endpoints == nil {
		return nil, fmt.Errorf("%s: endpoints: a list is required (`endpoints: []` for none)", file)
	}
	specs := *doc.Endpoints
	names := make(map[string]int, len(specs))
	for i, sp := range specs {
		where := fmt.Sprintf("%s: endpoints[%d]", file, i)
		if sp.Name == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		where += fmt.Sprintf(" (%s)", sp.Name)
		if j, dup := names[sp.Name]; dup {
			return nil, fmt.Errorf("%s: duplicate name, also used by endpoints[%d]", where, j)
		}
		names[sp.Name] = i
		if err := checkAddress(sp.Address); err != nil {
			return nil, fmt.Errorf("%s: address %q: %v", where, sp.Address, err)
		}
		for k := range sp.Labels {
			if strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("%s: labels: empty label name", where)
			}
		}
	}
	return specs, nil
}

// checkAddress accepts host:port with a non-empty host and a port in 1..65535.
func checkAddress(addr string) error {
	if addr == "" {
		return fmt.Errorf("required (host:port)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if host == "" {
		return fmt.Errorf("want host:port: empty host")
	}
	if strings.ContainsAny(host, "/ ") {
		return fmt.Errorf("want host:port: host %q is not a host name or IP", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("want host:port: port %q is not a number in 1..65535", port)
	}
	return nil
}
