// Hand-written reloading: k8s.io/apiserver's dynamiccertificates would serve, but shared does not depend on k8s.io/apiserver (binary size).

package serving

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// certCheckInterval bounds how often a handshake looks at the certificate files: two stats,
// and a read only when one changed or was written in the last seconds. The kubelet takes up to a minute or two to project a
// renewed Secret into the Pod, so a second more is nothing.
const certCheckInterval = time.Second

// racyWindow: a file modified this shortly before it was last read may have been written
// again within the same file-system clock tick, keeping its modification time (and a new key
// has the size of the old); such files are read again until they are older.
const racyWindow = 2 * time.Second

// certLoader hands each TLS handshake the key pair in certFile and keyFile, re-reading them
// when either file's modification time, size or identity changes (the kubelet updates a
// Secret volume by swapping a symlink, which a stat follows) and its content differs. A pair
// that does not load (half written, key not matching) leaves the last good one in service
// and is logged once; the next change of either file is tried again.
type certLoader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time

	mu        sync.Mutex
	logger    logr.Logger
	cert      *tls.Certificate
	seen      [2]os.FileInfo // the files when last read, loaded or not
	seenAt    time.Time
	content   [sha256.Size]byte
	nextCheck time.Time
	failure   string // the last failure logged, so that it is logged once
}

// newCertLoader loads the pair, failing when it does not load.
func newCertLoader(certFile, keyFile string) (*certLoader, error) {
	l := &certLoader{certFile: certFile, keyFile: keyFile, interval: certCheckInterval, now: time.Now, logger: logr.Discard()}
	seen, content, cert, err := l.read()
	if err != nil {
		return nil, err
	}
	l.seen, l.seenAt, l.content, l.cert = seen, l.now(), content, cert
	l.nextCheck = l.now().Add(l.interval)
	return l, nil
}

// setLogger names where reloads and failures are logged.
func (l *certLoader) setLogger(logger logr.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logger = logger
}

// current is the pair in service.
func (l *certLoader) current() *tls.Certificate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cert
}

// getCertificate is tls.Config.GetCertificate.
func (l *certLoader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); !now.Before(l.nextCheck) {
		l.nextCheck = now.Add(l.interval)
		l.refresh()
	}
	return l.cert, nil
}

// refresh reloads the pair if the files changed. Called with mu held.
func (l *certLoader) refresh() {
	cs, cerr := os.Stat(l.certFile)
	ks, kerr := os.Stat(l.keyFile)
	if cerr == nil && kerr == nil && l.unchanged(cs, l.seen[0]) && l.unchanged(ks, l.seen[1]) {
		return
	}
	now := l.now()
	seen, content, cert, err := l.read()
	if seen[0] != nil && seen[1] != nil {
		l.seen, l.seenAt = seen, now
	}
	if err != nil {
		if msg := err.Error(); msg != l.failure {
			l.failure = msg
			l.logger.Error(err, "Serving certificate files changed but do not load; keeping the previous certificate",
				"certFile", l.certFile, "keyFile", l.keyFile, "sha256", Fingerprint(l.cert.Certificate[0]))
		}
		return
	}
	l.failure = ""
	if content == l.content {
		return // touched or rewritten with the same bytes
	}
	l.content, l.cert = content, cert
	l.logger.Info("Reloaded the serving certificate", "certFile", l.certFile, "sha256", Fingerprint(cert.Certificate[0]))
}

// read stats and reads both files and parses the pair. seen holds what could be stat'ed.
func (l *certLoader) read() (seen [2]os.FileInfo, content [sha256.Size]byte, cert *tls.Certificate, err error) {
	var pems [2][]byte
	for i, path := range []string{l.certFile, l.keyFile} {
		if seen[i], err = os.Stat(path); err != nil {
			return seen, content, nil, err
		}
		if pems[i], err = os.ReadFile(path); err != nil {
			return seen, content, nil, err
		}
	}
	content = sha256.Sum256(bytes.Join(pems[:], []byte{0}))
	pair, err := tls.X509KeyPair(pems[0], pems[1])
	if err != nil {
		return seen, content, nil, fmt.Errorf("loading %s with key %s: %w", l.certFile, l.keyFile, err)
	}
	return seen, content, &pair, nil
}

// unchanged reports whether the file now stat'ed as a is the one last read as b, unchanged.
func (l *certLoader) unchanged(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size() &&
		b.ModTime().Before(l.seenAt.Add(-racyWindow))
}
