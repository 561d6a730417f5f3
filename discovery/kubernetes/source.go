package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// Source is a discovery.Source backed by the Kubernetes API.
type Source struct {
	cfg        Config
	standalone *target // nil in pool mode
	rest       *rest.Config
	scheme     *runtime.Scheme
	log        *slog.Logger

	running atomic.Bool
	leader  atomic.Bool
	synced  atomic.Bool

	endpoints prometheus.Gauge
	leaderG   prometheus.Gauge
	updates   prometheus.Counter
}

var _ discovery.Source = (*Source)(nil)

// NewPoolSource validates cfg and resolves the API server connection. It
// contacts nothing; Run does.
func NewPoolSource(cfg Config) (*Source, error) {
	t, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	rc := cfg.RestConfig
	switch {
	case rc != nil:
		rc = rest.CopyConfig(rc)
	case cfg.Kubeconfig != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("kubernetes discovery: kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	default:
		if rc, err = ctrlconfig.GetConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes discovery: no API server configuration (not in a cluster, no KUBECONFIG, no --kubeconfig): %w", err)
		}
	}
	sch := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(sch); err != nil {
		return nil, fmt.Errorf("kubernetes discovery: scheme: %w", err)
	}
	if err := inferencev1.Install(sch); err != nil {
		return nil, fmt.Errorf("kubernetes discovery: scheme: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Source{
		cfg: cfg, standalone: t, rest: rc, scheme: sch,
		log: log.With("source", "kubernetes", "namespace", cfg.Namespace),
		endpoints: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: profiles.MetricsNamespace, Name: "k8s_endpoints",
			Help: "Endpoints (ready pods × target ports) last delivered by Kubernetes discovery.",
		}),
		leaderG: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: profiles.MetricsNamespace, Name: "k8s_leader",
			Help: "1 while this replica delivers endpoints (always 1 without leader election).",
		}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: profiles.MetricsNamespace, Name: "k8s_endpoint_updates_total",
			Help: "Changed endpoint sets delivered by Kubernetes discovery.",
		}),
	}
	if cfg.PoolName != "" {
		s.log = s.log.With("pool", cfg.PoolName)
	}
	return s, nil
}

// Register exposes the source's metrics on reg. Call it before Run.
func (s *Source) Register(reg prometheus.Registerer) {
	s.endpoints = profiles.RegisterCollector(reg, s.endpoints)
	s.leaderG = profiles.RegisterCollector(reg, s.leaderG)
	s.updates = profiles.RegisterCollector(reg, s.updates)
}

// Leader reports whether this replica delivers endpoints: true once elected
// (or once started, without leader election).
func (s *Source) Leader() bool { return s.leader.Load() }

// Synced reports whether a first endpoint set has been delivered.
func (s *Source) Synced() bool { return s.synced.Load() }

// Config returns the configuration the source was built with.
func (s *Source) Config() Config { return s.cfg }

var setGlobalLoggers sync.Once

// Run implements discovery.Source. It returns nil when ctx is done, and an
// error when the API server cannot be used at start (the InferencePool CRD is
// not installed, RBAC denies listing pods or pools) or leadership is lost.
//
// The cache is started (and kept warm) on every replica; with leader
// election only the leader delivers endpoints, so followers stay unready
// and take over with a synced cache.
func (s *Source) Run(ctx context.Context, sink discovery.Sink) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("kubernetes discovery: Run called twice")
	}
	defer s.running.Store(false)
	lg := logr.FromSlogHandler(s.log.Handler())
	// controller-runtime and client-go (leader election) log through global
	// loggers; route them to ours instead of their stderr defaults.
	setGlobalLoggers.Do(func() {
		ctrllog.SetLogger(lg)
		klog.SetLogger(lg)
	})

	if err := s.preflight(ctx); err != nil {
		return err
	}
	c, err := cache.New(s.rest, s.cacheOptions())
	if err != nil {
		return fmt.Errorf("kubernetes discovery: cache: %w", err)
	}
	sy := &syncer{s: s, reader: c, sink: sink, poke: make(chan struct{}, 1)}
	if err := sy.watch(ctx, c, &corev1.Pod{}); err != nil {
		return err
	}
	if s.cfg.PoolName != "" {
		if err := sy.watch(ctx, c, &inferencev1.InferencePool{}); err != nil {
			return err
		}
	}

	// The cache runs until Run returns; its own failure ends the wait.
	cacheCtx, stopCache := context.WithCancel(ctx)
	cacheDone := make(chan error, 1)
	go func() {
		cacheDone <- c.Start(cacheCtx)
		stopCache()
	}()
	defer func() {
		stopCache()
		<-cacheDone
	}()
	if !c.WaitForCacheSync(cacheCtx) {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case err := <-cacheDone:
			cacheDone <- err // for the deferred wait
			if err == nil {
				return errors.New("kubernetes discovery: cache stopped before syncing")
			}
			return fmt.Errorf("kubernetes discovery: cache stopped before syncing: %w", err)
		default:
			return errors.New("kubernetes discovery: cache stopped before syncing")
		}
	}

	defer s.setLeader(false)
	if !s.cfg.LeaderElection {
		s.setLeader(true)
		return sy.run(ctx)
	}
	return s.lead(ctx, sy)
}

// preflight makes the mistakes an operator can fix fail Run at once with a
// clear message, instead of an informer that retries (and logs) forever.
func (s *Source) preflight(ctx context.Context) error {
	cl, err := client.New(s.rest, client.Options{Scheme: s.scheme})
	if err != nil {
		return fmt.Errorf("kubernetes discovery: client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(s.cfg.Namespace), client.Limit(1)); err != nil {
		return s.explain("listing pods", err)
	}
	if s.cfg.PoolName != "" {
		var pools inferencev1.InferencePoolList
		if err := cl.List(ctx, &pools, client.InNamespace(s.cfg.Namespace), client.Limit(1)); err != nil {
			return s.explain("listing InferencePools", err)
		}
	}
	return nil
}

func (s *Source) explain(what string, err error) error {
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return fmt.Errorf("kubernetes discovery: the API server does not serve InferencePool (%s): install the CRD, or run standalone with --endpoint-selector and --endpoint-target-ports: %w", inferencev1.SchemeGroupVersion, err)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("kubernetes discovery: %s in namespace %s is not allowed (the picker needs get/list/watch on pods and inferencepools there, see deploy/base/picker/rbac.yaml): %w", what, s.cfg.Namespace, err)
	}
	return fmt.Errorf("kubernetes discovery: %s in namespace %s: %w", what, s.cfg.Namespace, err)
}

func (s *Source) cacheOptions() cache.Options {
	podCache := cache.ByObject{Transform: trimPod}
	if s.standalone != nil {
		podCache.Label = s.standalone.selector
	}
	byObject := map[client.Object]cache.ByObject{&corev1.Pod{}: podCache}
	if s.cfg.PoolName != "" {
		byObject[&inferencev1.InferencePool{}] = cache.ByObject{
			Field: fields.OneTermEqualSelector("metadata.name", s.cfg.PoolName),
		}
	}
	return cache.Options{
		Scheme:            s.scheme,
		DefaultNamespaces: map[string]cache.Config{s.cfg.Namespace: {}},
		ByObject:          byObject,
	}
}

// lead runs the syncer only while this replica holds the Lease. Losing the
// Lease (rather than ctx ending) is an error: the process should restart as
// a follower, as controller-runtime managers do.
func (s *Source) lead(ctx context.Context, sy *syncer) error {
	ns := s.cfg.LeaderElectionNamespace
	if ns == "" {
		ns = s.cfg.Namespace
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	ld, rd, rp := s.cfg.LeaseDuration, s.cfg.RenewDeadline, s.cfg.RetryPeriod
	if ld <= 0 {
		ld = 15 * time.Second
	}
	if rd <= 0 {
		rd = 10 * time.Second
	}
	if rp <= 0 {
		rp = 2 * time.Second
	}
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, ns, s.cfg.leaseID(),
		resourcelock.ResourceLockConfig{Identity: id}, s.rest, rd)
	if err != nil {
		return fmt.Errorf("kubernetes discovery: leader election: %w", err)
	}
	// client-go runs OnStartedLeading in a goroutine it does not wait for;
	// the callback only hands over the leadership context, and the syncer
	// runs here, so Run never returns while it still delivers.
	elected := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: s.cfg.leaseID(),
		LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				elected <- lctx
				<-lctx.Done()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("kubernetes discovery: leader election: %w", err)
	}
	leDone := make(chan struct{})
	go func() {
		defer close(leDone)
		le.Run(ctx) // returns when ctx ends or the Lease is lost, cancelling lctx
	}()
	select {
	case <-leDone:
		if len(elected) > 0 && ctx.Err() == nil {
			return errors.New("kubernetes discovery: leader election lost")
		}
		return nil // ctx ended before this replica was elected
	case lctx := <-elected:
		s.log.Info("elected leader", "lease", ns+"/"+s.cfg.leaseID(), "identity", id)
		err := sy.run(lctx)
		s.setLeader(false)
		<-leDone
		switch {
		case err != nil:
			return err
		case ctx.Err() == nil:
			return errors.New("kubernetes discovery: leader election lost")
		}
		return nil
	}
}

func (s *Source) setLeader(v bool) {
	s.leader.Store(v)
	if v {
		s.leaderG.Set(1)
	} else {
		s.leaderG.Set(0)
	}
}

// syncer recomputes the whole endpoint set whenever anything it watches
// changes. Recomputing from the cache (rather than applying each event) is
// what makes a selector or port change a full resync and keeps the set
// correct after missed or coalesced events.
type syncer struct {
	s      *Source
	reader client.Reader
	sink   discovery.Sink
	poke   chan struct{} // one slot: bursts of events coalesce into one recompute
}

func (sy *syncer) notify() {
	select {
	case sy.poke <- struct{}{}:
	default:
	}
}

func (sy *syncer) watch(ctx context.Context, c cache.Cache, obj client.Object) error {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("kubernetes discovery: watching %T: %w", obj, err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { sy.notify() },
		UpdateFunc: func(any, any) { sy.notify() },
		DeleteFunc: func(any) { sy.notify() },
	})
	if err != nil {
		return fmt.Errorf("kubernetes discovery: watching %T: %w", obj, err)
	}
	return nil
}

// run delivers endpoint sets until ctx is done.
func (sy *syncer) run(ctx context.Context) error {
	s := sy.s
	if ctx.Err() != nil {
		return nil
	}
	s.setLeader(true)
	s.log.Info("delivering endpoints", "leaderElection", s.cfg.LeaderElection)
	var last []discovery.Spec
	waiting := false
	for {
		specs, ok, err := sy.compute(ctx)
		switch {
		case err != nil:
			s.log.Error("computing endpoints", "err", err)
		case !ok:
			if !waiting {
				s.log.Warn("InferencePool not found; not ready until it exists")
				waiting = true
			}
		case !s.synced.Load() || !sameSpecs(specs, last):
			waiting = false
			sy.sink.Update(specs)
			last = specs
			s.synced.Store(true)
			s.endpoints.Set(float64(len(specs)))
			s.updates.Inc()
			s.log.Info("endpoints updated", "count", len(specs))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sy.poke:
		}
	}
}

// compute reads the current endpoint set from the cache. ok is false while
// the pool has never been seen (the picker stays unready rather than start
// with a guessed set); a pool deleted after that yields an empty set.
func (sy *syncer) compute(ctx context.Context) (specs []discovery.Spec, ok bool, err error) {
	s := sy.s
	var t target
	if s.standalone != nil {
		t = *s.standalone
	} else {
		var pool inferencev1.InferencePool
		err := sy.reader.Get(ctx, types.NamespacedName{Namespace: s.cfg.Namespace, Name: s.cfg.PoolName}, &pool)
		switch {
		case apierrors.IsNotFound(err):
			if !s.synced.Load() {
				return nil, false, nil
			}
			return []discovery.Spec{}, true, nil
		case err != nil:
			return nil, false, fmt.Errorf("reading InferencePool: %w", err)
		}
		t = poolTarget(&pool)
	}
	var pods corev1.PodList
	if err := sy.reader.List(ctx, &pods, client.InNamespace(s.cfg.Namespace), client.MatchingLabelsSelector{Selector: t.selector}); err != nil {
		return nil, false, fmt.Errorf("listing pods: %w", err)
	}
	return endpointSpecs(t, pods.Items), true, nil
}

// trimPod keeps only what endpointSpecs reads, so a namespace with many
// large pod specs costs little memory in the cache.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status})
		}
	}
	return out, nil
}
