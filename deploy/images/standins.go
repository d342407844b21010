package main

import (
	"archive/tar"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"sort"
	"time"
)

// Files the agnhost image and the stand-ins built from the same binary carry besides their
// binary and userland.

// Names e2e.test v1.36.3 asks for (test/utils/image/manifest.go: Nautilus and Kitten, both
// 1.8): the images of the kubectl "Update Demo" specs.
const (
	NautilusRef = "registry.k8s.io/e2e-test-images/nautilus:1.8"
	KittenRef   = "registry.k8s.io/e2e-test-images/kitten:1.8"
)

// Paths of agnhost porter's TLS certificate and key: porter reads localhost.crt and
// localhost.key from its working directory (the image's is /) unless CERT_FILE and KEY_FILE
// name others.
const (
	LocalhostCert = "localhost.crt"
	LocalhostKey  = "localhost.key"
)

// localhostTLS is a self-signed ECDSA P-256 certificate for localhost (DNS name localhost, IP
// addresses 127.0.0.1 and ::1), valid from created for 100 years, and its private key (PKCS #8),
// both PEM, as the files /localhost.crt and /localhost.key. The key is derived from created and
// the signature is RFC 6979's deterministic one, so the same epoch gives the same files and
// the image stays reproducible; the key is no secret (a test image's, as upstream's is).
func localhostTLS(created time.Time) ([]File, error) {
	key, err := derivedKey(created)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(created.Unix() + 1),
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"kcm-split e2e stand-in"}},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:             created.UTC(),
		NotAfter:              created.UTC().AddDate(100, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root: a client can trust exactly this certificate
	}
	// A nil random source: ECDSA signs deterministically (RFC 6979), and the serial is given.
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("localhost certificate: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return []File{
		{Name: LocalhostCert, Type: tar.TypeReg, Mode: 0o644, Data: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{Name: LocalhostKey, Type: tar.TypeReg, Mode: 0o644, Data: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})},
	}, nil
}

// agnhostExtras are the agnhost image's files besides its binary and userland, as upstream's
// image has them: porter's TLS pair (localhostTLS) and /agnhost-2, a symbolic link to the
// binary, which the Containers specs name as the command to check that it overrides the
// entrypoint (agnhost's entrypoint-tester then prints "[/agnhost-2 entrypoint-tester ...]").
func agnhostExtras(created time.Time) ([]File, error) {
	files, err := localhostTLS(created)
	if err != nil {
		return nil, err
	}
	return append(files, File{Name: "agnhost-2", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "agnhost"}), nil
}

// derivedKey is a P-256 key whose scalar is SHA-256 of a fixed label, created and a counter,
// the first such hash that is a valid scalar (all but about one in 2^32 are).
func derivedKey(created time.Time) (*ecdsa.PrivateKey, error) {
	for i := uint32(0); i < 16; i++ {
		var b [12]byte
		binary.BigEndian.PutUint64(b[:8], uint64(created.Unix()))
		binary.BigEndian.PutUint32(b[8:], i)
		h := sha256.Sum256(append([]byte("kcm-split deploy/images localhost.key "), b[:]...))
		if key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), h[:]); err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("no valid P-256 scalar derived from %d", created.Unix())
}

// updateDemoData is /data.json of the Update Demo stand-ins: what the spec fetches through the
// apiserver's Pod proxy (port 80, the Pod's only container port), reading "image", which must
// contain the picture's name ("nautilus.jpg", "kitten.jpg").
func updateDemoData(picture string) (File, error) {
	b, err := json.MarshalIndent(map[string]string{"image": picture}, "", "  ")
	if err != nil {
		return File{}, err
	}
	return File{Name: "data.json", Type: tar.TypeReg, Mode: 0o644, Data: append(b, '\n')}, nil
}

// withFiles adds more to files and returns them sorted by path, as a userland comes.
func withFiles(files []File, more ...File) []File {
	out := append(append([]File(nil), files...), more...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
