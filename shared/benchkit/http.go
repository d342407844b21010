package benchkit

import (
	"crypto/tls"
	"io"
	"net/http"
	"time"
)

// insecure accepts the self-signed certificate kube-controller-manager serves on loopback.
var insecure = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a loopback benchmark target only
}}

// Get fetches url (http, or https with any certificate); code 0 means it did not answer.
func Get(url string) (code int, body string) {
	resp, err := insecure.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
