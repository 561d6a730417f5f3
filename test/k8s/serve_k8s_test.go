//go:build k8s

package k8s_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway-llm/spillway/director"
)

// writeKubeconfig writes the envtest credentials as a kubeconfig file, the
// way an operator runs `spillway serve --kubeconfig` outside a cluster.
func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData, Token: rc.BearerToken}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	cfg.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, p))
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeBinaryWithPool runs the real `spillway serve --pool-name
// --pool-namespace` binary against the API server: /readyz turns ready once
// the pool exists, and ext_proc routes to the pool's decode pod with the
// prefill pod as prefiller.
func TestServeBinaryWithPool(t *testing.T) {
	bin := spillwayBin(t)
	ns := newNamespace(t)
	createPod(t, ns, "dec", decodeLbl, "127.0.7.1", true)
	createPod(t, ns, "pre", prefillLbl, "127.0.7.2", true)
	cfgPath := filepath.Join(t.TempDir(), "pd.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(pdConfig), 0o644))
	grpcPort, metricsPort := freePort(t), freePort(t)

	c, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(c, bin, "serve", "--pool-name", "pool", "--pool-namespace", ns,
		"--kubeconfig", writeKubeconfig(t, restCfg), "--config", cfgPath, "--bind-address", "127.0.0.1",
		"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", "0", "--metrics-port", strconv.Itoa(metricsPort))
	cmd.WaitDelay = 10 * time.Second
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("spillway serve output:\n%s", out.String())
		}
	})

	readyz := func() int {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("spillway serve exited: %v\n%s", err, out.String())
		default:
		}
		r, err := http.Get("http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/readyz")
		if err != nil {
			return 0
		}
		r.Body.Close()
		return r.StatusCode
	}
	eventually(t, "serve answers /readyz", func() bool { return readyz() != 0 })
	assert.Equal(t, http.StatusServiceUnavailable, readyz(), "not ready before the pool exists")
	createPool(t, ns, "pool", map[string]string{"app": "vllm"}, 8000)
	eventually(t, "serve ready once the pool synced", func() bool { return readyz() == http.StatusOK })

	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	p := &picker{client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(conn)}
	eventually(t, "gRPC readiness SERVING", func() bool { return p.ready(t) })
	set, status := p.route(t)
	require.Equal(t, 200, status)
	assert.Equal(t, "127.0.7.1:8000", set[director.HeaderDestination])
	assert.Equal(t, "127.0.7.2:8000", set[director.HeaderPrefiller])
}
