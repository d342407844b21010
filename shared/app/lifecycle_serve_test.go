package app

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/serving"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// secureBinary runs a binary in-process with the secure port on a free loopback port and
// returns its base URL once /healthz answers.
func secureBinary(t *testing.T, id string, args ...string) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(func(ctx context.Context, rt *Runtime) error {
		rt.SetSynced(func() bool { return true })
		<-ctx.Done()
		return nil
	})
	spec.ID = id
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- Run(ctx, spec, append([]string{id,
			"--kubeconfig=" + env.Kubeconfig,
			fmt.Sprintf("--secure-port=%d", port),
			"--bind-address=127.0.0.1",
			"--leader-elect=false",
			"--log-level=error",
		}, args...), &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != ExitOK {
				t.Errorf("%s exit = %d: %s", id, code, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not exit", id)
		}
	})
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case code := <-done:
			return false, fmt.Errorf("exited with %d: %s", code, stderr.String())
		default:
		}
		code, _, _ := httpsGet(base+"/healthz", "")
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s never served /healthz over HTTPS: %v", id, err)
	}
	return base
}

var insecureClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
}

func httpsGet(url, token string) (int, string, error) { return get(insecureClient, url, token) }

// serviceAccountToken creates a ServiceAccount and returns a token for it.
func serviceAccountToken(t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// tokenReviews counts the TokenReviews the binary id has sent.
func tokenReviews(t *testing.T, id string) int {
	t.Helper()
	ev, err := env.Writes(testenv.ByUserAgentPrefix(id+"/", "tokenreviews"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ev)
}

// TestSecurePortAuthenticatesAndAuthorizes is the scrape an operator sets up: a ServiceAccount
// bound to a ClusterRole with get on /metrics reads the metrics over HTTPS; one without the
// binding, or no token at all, never sees them; health needs no token; and repeated scrapes
// reuse the review answers.
func TestSecurePortAuthenticatesAndAuthorizes(t *testing.T) {
	testenv.Require(t, env)
	ctx := context.Background()
	client := env.Client(t)
	ns := env.Namespace(t)
	const id = "secure-test"

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "scraper"}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
	scraper := serviceAccountToken(t, client, ns, "scraper")
	stranger := serviceAccountToken(t, client, ns, "stranger")

	base := secureBinary(t, id)

	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		if code, body, err := httpsGet(base+p, ""); err != nil || code != http.StatusOK {
			t.Errorf("%s without a token = %d %q %v, want 200", p, code, body, err)
		}
	}
	if code, body, err := httpsGet(base+"/metrics", ""); err != nil || code != http.StatusUnauthorized || strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics without a token = %d %q %v, want 401 and no metrics", code, body, err)
	}
	if code, body, err := httpsGet(base+"/metrics", "not-a-token"); err != nil || code != http.StatusUnauthorized || strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics with a bad token = %d %q %v, want 401 and no metrics", code, body, err)
	}
	if code, body, err := httpsGet(base+"/metrics", stranger); err != nil || code != http.StatusForbidden || strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics as an unbound ServiceAccount = %d %q %v, want 403 and no metrics", code, body, err)
	}

	before := tokenReviews(t, id)
	code, body, err := httpsGet(base+"/metrics", scraper)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics as the bound ServiceAccount = %d %v, want 200 with metrics", code, err)
	}
	if !strings.Contains(body, `kcm_split_secure_serving_requests_total{decision="forbidden"} 1`) {
		t.Errorf("the requests metric did not count the 403")
	}
	first := tokenReviews(t, id)
	if first != before+1 {
		t.Errorf("the first scrape made %d TokenReviews, want 1", first-before)
	}
	for range 3 {
		if code, _, err := httpsGet(base+"/metrics", scraper); err != nil || code != http.StatusOK {
			t.Fatalf("repeated scrape = %d %v", code, err)
		}
	}
	if n := tokenReviews(t, id); n != first {
		t.Errorf("scrapes within the cache window made %d more TokenReviews, want 0", n-first)
	}

	// The scraper may read /metrics only; profiling is off, and would be authorized anyway.
	if code, _, _ := httpsGet(base+"/debug/pprof/", scraper); code != http.StatusForbidden {
		t.Errorf("/debug/pprof/ as the scraper = %d, want 403", code)
	}
	admin := env.Config.BearerToken
	if code, _, _ := httpsGet(base+"/debug/pprof/", admin); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --profiling = %d, want 404", code)
	}
}

// TestSecurePortProfilingAndGivenCertificate: --profiling serves pprof to authorized users
// only, and a certificate given by flag is the one clients see.
func TestSecurePortProfilingAndGivenCertificate(t *testing.T) {
	testenv.Require(t, env)
	certFile, keyFile, der := writeCertificate(t)
	base := secureBinary(t, "secure-cert-test", "--profiling", "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)

	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	served := conn.ConnectionState().PeerCertificates
	_ = conn.Close()
	if len(served) == 0 || !bytes.Equal(served[0].Raw, der) {
		t.Fatalf("served certificate is not the one given (fingerprint %s)", serving.Fingerprint(served[0].Raw))
	}

	if code, _, _ := httpsGet(base+"/debug/pprof/", ""); code != http.StatusUnauthorized {
		t.Errorf("/debug/pprof/ without a token = %d, want 401", code)
	}
	if code, body, _ := httpsGet(base+"/debug/pprof/", env.Config.BearerToken); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ as admin with --profiling = %d, want 200 with profiles", code)
	}
}

// TestSecurePortOff: --secure-port=0 serves nothing securely, and plain HTTP only when asked.
func TestSecurePortOff(t *testing.T) {
	testenv.Require(t, env)
	// The test holds the default port for the whole run, so that a server listening on it
	// anyway (on any address) fails Run before the controller runs. (Dialling a port merely
	// free a moment ago could reach another process that took it since.)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	started := make(chan struct{})
	spec := testSpec(func(ctx context.Context, rt *Runtime) error { close(started); <-ctx.Done(); return nil })
	spec.DefaultPort = port
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- Run(ctx, spec, []string{"off-test", "--kubeconfig=" + env.Kubeconfig, "--secure-port=0", "--leader-elect=false", "--log-level=error"}, &stderr)
	}()
	// Servers start before the controller runs: once it runs, whatever would listen does.
	select {
	case <-started:
	case code := <-done:
		t.Fatalf("exited early with %d: %s", code, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("never started")
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("exit = %d: %s", code, stderr.String())
	}
}

// writeCertificate writes a self-signed certificate and key for 127.0.0.1.
func writeCertificate(t *testing.T) (certFile, keyFile string, der []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: "given-by-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, der
}
