// Package testenv starts a real etcd and kube-apiserver (v1.36.3, built by `make tools`) for
// integration tests: free loopback ports, RBAC authorization on, an admin token for the test,
// an audit log of every write so tests can count exactly what a controller wrote, and a clean
// stop. Start it once per test package from TestMain.
//
// For drills it injects faults: an apiserver outage on the same etcd (Env.StopAPIServer,
// Env.StartAPIServer, Env.APIServerOutage), a frozen process (Process.Freeze, Process.Thaw),
// expired watches (Env.CompactEtcd, Env.ExpireWatches), and it tells replicas apart: each
// kcm-split process's identity (Controller.Identity), the Lease's holder (Env.LeaseHolder) and
// its writes in the audit log (ByIdentity, ReceivedAfter, AuditEvent.Succeeded, WritesByAgent).
package testenv

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BinDirEnv overrides where the control plane binaries are looked up.
const BinDirEnv = "KCM_SPLIT_BIN_DIR"

// AdminUser is the user name of the test's admin token (group system:masters).
const AdminUser = "kcm-split-admin"

// Options tune the control plane.
type Options struct {
	// BinDir holds etcd and kube-apiserver; empty means $KCM_SPLIT_BIN_DIR or <repo>/bin.
	BinDir string
	// ExtraAPIServerArgs are appended to the kube-apiserver command line.
	ExtraAPIServerArgs []string
	// StartTimeout bounds the wait for etcd and the apiserver; default 90s.
	StartTimeout time.Duration
	// AuditPolicy replaces the default audit policy (every write at Metadata level, nothing
	// else), e.g. to record reads as well; Env.Audit reads what it records.
	AuditPolicy string
	// Setup runs once the control plane is ready, before Start returns (install CRDs, seed
	// objects); its error stops the control plane and fails Start.
	Setup func(*Env) error
}

// Env is a running control plane.
type Env struct {
	// Config is an admin client configuration (system:masters).
	Config *rest.Config
	// Kubeconfig is a file holding the same admin credentials, for binaries under test.
	Kubeconfig string
	// Dir holds data, logs, certificates and the audit log; removed by Stop.
	Dir string
	// Host is the apiserver URL.
	Host string
	// ServiceAccountKey signs ServiceAccount tokens (TokenRequest works).
	ServiceAccountKey string
	// EtcdURL is etcd's client URL (plain HTTP, no authentication): its v3 JSON gateway
	// serves /v3/kv/range, /v3/kv/compaction and the rest of the KV API.
	EtcdURL string

	etcd      *Process
	auditPath string
	keep      bool

	// The apiserver's command line and admin token, to start it again after StopAPIServer.
	apiBin   string
	apiArgs  []string
	apiToken string
	// mu guards apiserver and apiStarts: a fault-injection helper may replace the process
	// while Stop runs from another goroutine.
	mu        sync.Mutex
	apiserver *Process
	apiStarts int
}

// FindBinDir returns the directory holding the control plane binaries: $KCM_SPLIT_BIN_DIR, or
// bin/ at the root of the repository (the directory holding go.work) above the working dir.
func FindBinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory; set " + BinDirEnv)
		}
		dir = parent
	}
}

func binary(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s not found in %s: run `make tools` first (it builds etcd and kube-apiserver v1.36.3 into bin/)", name, dir)
	}
	return p, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// holdPorts listens on n loopback TCP ports at once, so that the ports are distinct; each
// stays taken until its listener is closed. A variable for the test of Start's retry.
var holdPorts = func(n int) ([]net.Listener, error) {
	var held []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll(held)
			return nil, err
		}
		held = append(held, l)
	}
	return held, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}

func portOf(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// startAttempts bounds Start's tries: between closing a listener that held a port and etcd or
// the apiserver binding it, another process on the machine may take it.
const startAttempts = 3

// errAddrInUse marks a start-up that failed because a port was taken meanwhile.
var errAddrInUse = errors.New("address already in use")

// Start launches etcd and kube-apiserver and waits until the apiserver is ready. When etcd or
// the apiserver exits because a port was taken ("address already in use" in its log), it starts
// again on new ports, up to 3 times in all, saying so on stderr.
func Start(opts Options) (*Env, error) {
	for attempt := 1; ; attempt++ {
		env, err := start(opts)
		if err == nil || !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			return env, err
		}
		fmt.Fprintf(os.Stderr, "testenv: start %d of %d failed on a taken port, starting again on new ports: %v\n", attempt, startAttempts, err)
	}
}

// start is one try of Start.
// Over 80 lines: one start sequence (files, etcd, apiserver, readiness) whose deferred cleanup
// on failure must see every step.
func start(opts Options) (env *Env, err error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	etcdBin, err := binary(binDir, "etcd")
	if err != nil {
		return nil, err
	}
	apiBin, err := binary(binDir, "kube-apiserver")
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "kcm-split-testenv-")
	if err != nil {
		return nil, err
	}
	env = &Env{Dir: dir, keep: os.Getenv("KCM_SPLIT_KEEP_TESTENV") != ""}
	// Error returns below set env to nil: stop what was started through a copy.
	started := env
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()

	// etcd's client and peer ports and the apiserver's, held until their process starts.
	held, err := holdPorts(3)
	if err != nil {
		return nil, err
	}
	defer closeAll(held) // the ones not closed yet, on an early return
	clientPort, peerPort, port := portOf(held[0]), portOf(held[1]), portOf(held[2])

	// etcd
	closeAll(held[:2])
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	env.EtcdURL = etcdURL
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	env.etcd, err = StartProcess("etcd", filepath.Join(dir, "etcd.log"), etcdBin,
		"--name=testenv",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL,
		"--log-level=warn",
		// Test data is thrown away; fsync only slows the suite down on shared disks.
		"--unsafe-no-fsync=true",
	)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, env.etcd, etcdURL+"/health", nil); err != nil {
		return nil, err
	}

	// Credentials: an admin token, a ServiceAccount signing key, an audit policy.
	token, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, fmt.Appendf(nil, "%s,%s,%s-uid,\"system:masters\"\n", token, AdminUser, AdminUser), 0o600); err != nil {
		return nil, err
	}
	env.ServiceAccountKey = filepath.Join(dir, "sa.key")
	if err := writeRSAKey(env.ServiceAccountKey); err != nil {
		return nil, err
	}
	env.auditPath = filepath.Join(dir, "audit.log")
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(cmp.Or(opts.AuditPolicy, DefaultAuditPolicy)), 0o600); err != nil {
		return nil, err
	}

	env.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + env.ServiceAccountKey,
		"--service-account-signing-key-file=" + env.ServiceAccountKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/16",
		// No serviceaccount controller runs in tests, so Pods must not need a default
		// ServiceAccount to exist.
		"--disable-admission-plugins=ServiceAccount",
		"--audit-log-path=" + env.auditPath,
		"--audit-policy-file=" + policy,
		"--audit-log-mode=blocking",
		"--v=0",
	}
	env.apiBin, env.apiArgs, env.apiToken = apiBin, append(args, opts.ExtraAPIServerArgs...), token
	_ = held[2].Close()
	if err := env.startAPIServer(ctx); err != nil {
		return nil, err
	}

	env.Config = &rest.Config{
		Host:            env.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1, // tests create hundreds of objects quickly; no client-side throttling
		UserAgent:       "kcm-split-testenv",
		// Tests write deprecated core/v1 Endpoints on purpose.
		WarningHandler: rest.NoWarnings{},
	}
	env.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := WriteKubeconfig(env.Kubeconfig, env.Host, AdminUser, token); err != nil {
		return nil, err
	}
	// The apiserver creates the system namespaces shortly after it is ready.
	client := kubernetes.NewForConfigOrDie(env.Config)
	for _, ns := range []string{"default", "kube-system", "kube-node-lease"} {
		if err := waitFor(ctx, func() bool {
			_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err == nil
		}); err != nil {
			return nil, fmt.Errorf("namespace %s never appeared: %w", ns, err)
		}
	}
	if opts.Setup != nil {
		if err := opts.Setup(env); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	return env, nil
}

// DefaultAuditPolicy records every write at Metadata level and nothing else, so counting a
// controller's writes is a matter of reading one file.
const DefaultAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// startAPIServer starts kube-apiserver with the command line Start built and waits until it
// is ready. The first start logs to kube-apiserver.log, the next ones to
// kube-apiserver.<n>.log.
func (env *Env) startAPIServer(ctx context.Context) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.apiserver != nil && !env.apiserver.Exited() {
		return errors.New("kube-apiserver is already running")
	}
	env.apiStarts++
	log := "kube-apiserver.log"
	if env.apiStarts > 1 {
		log = fmt.Sprintf("kube-apiserver.%d.log", env.apiStarts)
	}
	p, err := StartProcess("kube-apiserver", filepath.Join(env.Dir, log), env.apiBin, env.apiArgs...)
	if err != nil {
		return err
	}
	env.apiserver = p
	return waitHTTP(ctx, p, env.Host+"/readyz", &env.apiToken)
}

func waitHTTP(ctx context.Context, p *Process, url string, token *string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err := waitFor(ctx, func() bool {
		if p.Exited() {
			return true
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != nil {
			req.Header.Set("Authorization", "Bearer "+*token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if p.Exited() {
		if b, _ := os.ReadFile(p.Log); bytes.Contains(b, []byte(errAddrInUse.Error())) {
			return fmt.Errorf("%s exited during start-up: %w; last log lines (%s):\n%s", p.Name, errAddrInUse, p.Log, p.Tail(20))
		}
		return fmt.Errorf("%s exited during start-up; last log lines (%s):\n%s", p.Name, p.Log, p.Tail(20))
	}
	if err != nil {
		return fmt.Errorf("%s not ready at %s: %w; last log lines (%s):\n%s", p.Name, url, err, p.Log, p.Tail(20))
	}
	return nil
}

func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Stop stops the apiserver, then etcd, and removes Dir (kept when KCM_SPLIT_KEEP_TESTENV is
// set, for debugging).
func (env *Env) Stop() {
	if env == nil {
		return
	}
	env.mu.Lock()
	env.apiserver.Stop(10 * time.Second)
	env.mu.Unlock()
	env.etcd.Stop(10 * time.Second)
	if env.keep {
		fmt.Fprintf(os.Stderr, "testenv: kept %s\n", env.Dir)
		return
	}
	_ = os.RemoveAll(env.Dir)
}

// AuditEvent is the part of an audit event tests look at.
type AuditEvent struct {
	// AuditID is unique per request.
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	// RequestURI is the path and query, e.g. /api/v1/namespaces/x/configmaps?fieldManager=y.
	RequestURI string `json:"requestURI"`
	// UserAgent is the client's; a kcm-split binary's ends with its leader-election identity
	// (see Identity).
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestReceivedTimestamp is when the apiserver received the request (microseconds), the
	// time to compare with a fault's: a request sent just before it may be received after.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	// StageTimestamp is when the apiserver answered (ResponseComplete stage).
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// IsWrite reports whether the event is a create, update, patch, delete or deletecollection.
func (ev AuditEvent) IsWrite() bool {
	switch ev.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Writes returns every write (create, update, patch, delete, deletecollection) the apiserver
// has completed so far that every filter keeps (a nil filter keeps all). The audit log is
// written in blocking mode, so a write a client saw answered is already in it.
func (env *Env) Writes(keep ...func(AuditEvent) bool) ([]AuditEvent, error) {
	return env.Audit(append([]func(AuditEvent) bool{AuditEvent.IsWrite}, keep...)...)
}

// Audit returns every event of the audit log so far that every filter keeps (a nil filter
// keeps all): the writes with the default policy, more with Options.AuditPolicy. The log
// spans apiserver restarts (StopAPIServer, StartAPIServer).
func (env *Env) Audit(keep ...func(AuditEvent) bool) ([]AuditEvent, error) {
	evs, err := ReadAudit[AuditEvent](env)
	if err != nil {
		return nil, err
	}
	return Filter(evs, keep...), nil
}

// ReadAudit decodes every event of env's audit log so far into a T, in the log's order: T is
// AuditEvent, or a type embedding it with the fields a test needs beyond it (a request body
// the policy records). A line that does not decode is skipped. ReadAuditFiles reads any
// apiserver's log the same way.
func ReadAudit[T any](env *Env) ([]T, error) {
	return ReadAuditFiles[T](env.auditPath)
}

// ByUserAgentPrefix keeps events whose user agent starts with prefix (a controller ID).
func ByUserAgentPrefix(prefix string, resources ...string) func(AuditEvent) bool {
	return func(ev AuditEvent) bool {
		if !strings.HasPrefix(ev.UserAgent, prefix) {
			return false
		}
		if len(resources) == 0 {
			return true
		}
		for _, r := range resources {
			if ev.ObjectRef.Resource == r {
				return true
			}
		}
		return false
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

// WriteKubeconfig writes a kubeconfig at path for user, authenticating with token to the
// apiserver at host (its serving certificate is not checked). Tests use it to run a binary
// with other credentials than the admin's, e.g. a ServiceAccount token.
func WriteKubeconfig(path, host, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: host, InsecureSkipTLSVerify: true}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user}
	cfg.CurrentContext = "testenv"
	return clientcmd.WriteToFile(*cfg, path)
}
