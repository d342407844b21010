package serving

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// pair is a certificate and its key, PEM, and the certificate's fingerprint.
type pair struct {
	cert, key   []byte
	fingerprint string
}

func newPair(t *testing.T) pair {
	t.Helper()
	c, err := selfSigned(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pair{
		cert:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
		fingerprint: Fingerprint(c.Certificate[0]),
	}
}

// project lays p out in dir as the kubelet lays out a Secret volume: tls.crt and tls.key are
// symlinks through ..data, a symlink to a timestamped directory that each update replaces by
// renaming a new symlink over it.
func project(t *testing.T, dir string, p pair) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": p.cert, "tls.key": p.key} {
		if err := os.WriteFile(filepath.Join(ts, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// served is the fingerprint of the certificate a new TLS connection to addr is given.
func served(t *testing.T, addr string) string {
	t.Helper()
	// A fresh config per dial: no session to resume, so every dial is a full handshake. The
	// test certificates are self-signed: only which one is served matters.
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return Fingerprint(conn.ConnectionState().PeerCertificates[0].Raw)
}

// logLines records what a logger was told.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, args)
}

// count is how many lines contain s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func TestServerReloadsRenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	a, b, c := newPair(t), newPair(t), newPair(t)
	project(t, dir, a)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	o := &Options{BindAddress: "127.0.0.1", CertFile: certFile, KeyFile: keyFile}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	o.certs.interval, o.certs.nextCheck = 0, time.Time{} // look at the files on every handshake
	logs := &logLines{}
	srv, err := Start(funcr.New(logs.add, funcr.Options{}), o, DefaultCacheTTLs, &rest.Config{Host: "https://127.0.0.1:1"},
		prometheus.NewRegistry(), http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	addr := srv.Addr().String()

	if got := served(t, addr); got != a.fingerprint {
		t.Fatalf("served %s at start, want A %s", got, a.fingerprint)
	}
	project(t, dir, b) // the kubelet projects the renewed Secret
	if got := served(t, addr); got != b.fingerprint {
		t.Fatalf("served %s after the Secret was renewed, want B %s", got, b.fingerprint)
	}

	const failed = "do not load; keeping the previous certificate"
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := served(t, addr); got != b.fingerprint {
			t.Fatalf("served %s after a corrupt certificate file, want the last good B %s", got, b.fingerprint)
		}
	}
	if n := logs.count(failed); n != 1 {
		t.Fatalf("the corrupt file was logged %d times over 3 handshakes, want once", n)
	}

	// Written one file at a time: the new certificate with the old key does not load...
	if err := os.WriteFile(certFile, c.cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := served(t, addr); got != b.fingerprint {
		t.Fatalf("served %s with a certificate not matching its key, want B %s", got, b.fingerprint)
	}
	if n := logs.count(failed); n != 2 {
		t.Fatalf("failures logged %d times, want 2 (the corrupt file, then the mismatched key)", n)
	}
	// ...and its key completes it. Written beside and renamed over the file: a key has the
	// same size as the last, and two writes in one clock tick could share a modification
	// time; a new file is a change whatever the clock says.
	if err := os.WriteFile(keyFile+".new", c.key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(keyFile+".new", keyFile); err != nil {
		t.Fatal(err)
	}
	if got := served(t, addr); got != c.fingerprint {
		t.Fatalf("served %s once the key was written too, want C %s", got, c.fingerprint)
	}
	if n := logs.count("Reloaded the serving certificate"); n != 2 {
		t.Errorf("reloads logged %d times, want 2 (B, C)", n)
	}
}

// TestCertLoaderLooksAtMostOncePerInterval: handshakes within the interval are not slowed by
// looking at the files; the first after it sees the change.
func TestCertLoaderLooksAtMostOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	a, b := newPair(t), newPair(t)
	project(t, dir, a)
	l, err := newCertLoader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.nextCheck = now.Add(l.interval)
	fingerprint := func() string {
		c, err := l.getCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return Fingerprint(c.Certificate[0])
	}
	project(t, dir, b)
	now = now.Add(l.interval - time.Millisecond)
	if got := fingerprint(); got != a.fingerprint {
		t.Fatal("the files were looked at before the interval passed")
	}
	now = now.Add(time.Millisecond)
	if got := fingerprint(); got != b.fingerprint {
		t.Fatalf("served %s once the interval passed, want B %s", got, b.fingerprint)
	}
}

// TestValidateRejectsAPairThatDoesNotLoad: at start there is no last good pair, so a bad one
// is an error naming the flag.
func TestValidateRejectsAPairThatDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	a, b := newPair(t), newPair(t)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for name, data := range map[string][]byte{certFile: a.cert, keyFile: b.key} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := &Options{CertFile: certFile, KeyFile: keyFile}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), FlagTLSCertFile) {
		t.Fatalf("mismatched pair: err %v, want one naming --%s", err, FlagTLSCertFile)
	}
}

// TestCertLoaderRereadsRecentlyWrittenFiles: a pair rewritten in place with the same sizes
// within one file-system clock tick keeps every stat field; it is read again all the same
// while the files are recent.
func TestCertLoaderRereadsRecentlyWrittenFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := newPair(t), newPair(t)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	// Padded to one size: text after the PEM blocks is ignored.
	write := func(p pair) {
		for name, data := range map[string][]byte{certFile: p.cert, keyFile: p.key} {
			if err := os.WriteFile(name, slices.Concat(data, bytes.Repeat([]byte("\n"), 4096-len(data))), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(a)
	l, err := newCertLoader(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l.interval, l.nextCheck = 0, time.Time{}
	before := [2]os.FileInfo{}
	for i, name := range []string{certFile, keyFile} {
		if before[i], err = os.Stat(name); err != nil {
			t.Fatal(err)
		}
	}
	write(b)
	for i, name := range []string{certFile, keyFile} {
		if err := os.Chtimes(name, before[i].ModTime(), before[i].ModTime()); err != nil {
			t.Fatal(err)
		}
		after, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(before[i], after) || after.Size() != before[i].Size() || !after.ModTime().Equal(before[i].ModTime()) {
			t.Fatalf("%s: the rewrite changed what a stat shows; the test needs it not to", name)
		}
	}
	c, err := l.getCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := Fingerprint(c.Certificate[0]); got != b.fingerprint {
		t.Errorf("served %s after a rewrite a stat cannot see, want B %s", got, b.fingerprint)
	}
}
