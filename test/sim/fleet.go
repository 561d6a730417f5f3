package sim

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// FleetConfig describes an in-process real-HTTP fleet on loopback.
type FleetConfig struct {
	Model     string  // default "sim-model"
	Profile   Profile // default profile when zero
	TimeScale float64 // simulated seconds per wall second (default 1)
	Host      string  // default 127.0.0.1
	BasePort  int     // 0: random free ports; else consecutive from BasePort
	// Counts per role, started in the order encode, prefill, decode, both.
	Encode, Prefill, Decode, Both int
	Faults                        Faults
	// KVEvents, if true, gives every non-encode endpoint a bound PUB socket
	// and replay ROUTER on random loopback ports (or BasePort+1000+i,
	// BasePort+2000+i).
	KVEvents bool
}

// FleetEndpoint is one running endpoint.
type FleetEndpoint struct {
	Name    string
	Role    Role
	Address string // host:port
	*Server
}

// Fleet is a running set of real-HTTP simulators.
type Fleet struct {
	Endpoints []*FleetEndpoint
}

// StartFleet starts the fleet; Close it when done. ctx cancellation also
// closes it.
func StartFleet(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	f := &Fleet{}
	i := 0
	for _, rc := range []struct {
		role Role
		n    int
	}{{RoleEncode, cfg.Encode}, {RolePrefill, cfg.Prefill}, {RoleDecode, cfg.Decode}, {RoleBoth, cfg.Both}} {
		for j := 0; j < rc.n; j++ {
			port := 0
			if cfg.BasePort > 0 {
				port = cfg.BasePort + i
			}
			sc := ServerConfig{Model: cfg.Model, Role: rc.role, Profile: cfg.Profile, TimeScale: cfg.TimeScale, Faults: cfg.Faults,
				Listen: net.JoinHostPort(cfg.Host, strconv.Itoa(port))}
			if cfg.KVEvents && rc.role != RoleEncode {
				pp, rp := 0, 0
				if cfg.BasePort > 0 {
					pp, rp = cfg.BasePort+1000+i, cfg.BasePort+2000+i
				}
				sc.KVEvents = &KVEventsConfig{Endpoint: fmt.Sprintf("tcp://%s:%d", cfg.Host, pp), ReplayEndpoint: fmt.Sprintf("tcp://%s:%d", cfg.Host, rp)}
			}
			s, err := NewServer(sc)
			if err != nil {
				f.Close()
				return nil, err
			}
			f.Endpoints = append(f.Endpoints, &FleetEndpoint{Name: s.Name(), Role: rc.role, Address: s.Addr(), Server: s})
			i++
		}
	}
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	return f, nil
}

// ByRole lists the endpoints of one role.
func (f *Fleet) ByRole(r Role) []*FleetEndpoint {
	var out []*FleetEndpoint
	for _, e := range f.Endpoints {
		if e.Role == r {
			out = append(out, e)
		}
	}
	return out
}

// Close stops every endpoint (idempotent).
func (f *Fleet) Close() error {
	for _, e := range f.Endpoints {
		if e.Server != nil {
			e.Server.Close()
		}
	}
	return nil
}

// EndpointsYAML renders the fleet as a discovery static endpoints file
// (endpoints: [{name, address, labels: {llm-d.ai/role: ...}}]).
func (f *Fleet) EndpointsYAML() string {
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, e := range f.Endpoints {
		fmt.Fprintf(&b, "- name: %s\n  address: %s\n  labels:\n    llm-d.ai/role: %s\n", e.Name, e.Address, e.Role)
		if e.KVEventsAddr() != "" {
			// The label names prefill's precise-prefix-cache-producer reads
			// (prefill.KVEventsEndpointLabel, KVReplayEndpointLabel).
			fmt.Fprintf(&b, "    spillway.io/kv-events-endpoint: tcp://%s\n    spillway.io/kv-replay-endpoint: tcp://%s\n", e.KVEventsAddr(), e.KVReplayAddr())
		}
	}
	return b.String()
}
