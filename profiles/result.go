package profiles

import "strings"

// CycleState is what one profile run sees besides the request: its own
// profile name and the results of the profiles that already ran for this
// request (e.g. the prefill profile can see the decode pick).
type CycleState struct {
	Profile string
	Results map[string]*ProfileResult
}

// ProfileResult is one profile's pick.
type ProfileResult struct {
	Profile    string
	Targets    []*Endpoint // target first, then fallbacks
	Candidates int         // endpoints left after the filters
}

// Target returns the chosen endpoint, or nil.
func (p *ProfileResult) Target() *Endpoint {
	if p == nil || len(p.Targets) == 0 {
		return nil
	}
	return p.Targets[0]
}

// Result is the scheduling decision for a request.
type Result struct {
	// Primary names the profile whose targets are the destination.
	Primary string
	// Profiles holds every profile that ran and picked, by name.
	Profiles map[string]*ProfileResult
	// Headers are routing headers to set on the upstream request
	// (x-prefiller-host-port, x-encoder-hosts-ports).
	Headers map[string]string
	// Decision and Reason explain a disaggregation decision
	// (decision type, and why a stage was skipped).
	Decision string
	Reason   string
}

// Destination returns the primary profile's targets.
func (r *Result) Destination() []*Endpoint {
	if r == nil {
		return nil
	}
	if p := r.Profiles[r.Primary]; p != nil {
		return p.Targets
	}
	return nil
}

// DestinationValue returns the x-gateway-destination-endpoint value:
// "ip:port[,ip:port...]", primary first.
func (r *Result) DestinationValue() string {
	d := r.Destination()
	switch len(d) {
	case 0:
		return ""
	case 1:
		return d[0].Address
	}
	var b strings.Builder
	for i, e := range d {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Address)
	}
	return b.String()
}

// Target returns the endpoint a named profile picked, or nil.
func (r *Result) Target(profile string) *Endpoint {
	if r == nil {
		return nil
	}
	return r.Profiles[profile].Target()
}
