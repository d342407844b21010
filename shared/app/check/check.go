// Package check is the subcommand every kcm-split binary has, `<binary> check ...`: it checks
// a running controller from outside, its /readyz and its Leases' holders, as `helm test` does
// with the controller's own image (distroless: no shell, no curl), and exits 0 or 1 with a
// one-line reason.
package check

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/app/internal/cmdline"
	"github.com/kcm-split/kcm-split/shared/kube"
)

// Command is the subcommand's name: `<binary> check`.
const Command = "check"

// Flags of the check subcommand. They are the subcommand's alone: `<binary> --help` does not
// list them (they are not controller flags), and no KCM_SPLIT_ variable sets them, so a Pod's
// environment (Service links, the controller's own variables) never changes what is checked.
const (
	FlagReadyzURL      = "readyz-url"
	FlagReadyzAddress  = "readyz-address"
	FlagCAFile         = "ca-file"
	FlagTLSServerName  = "tls-server-name"
	FlagLeaseNamespace = "lease-namespace"
	FlagLease          = "lease"
	FlagTimeout        = "timeout"
	FlagAttempts       = "attempts"
	FlagClockSkew      = "max-clock-skew"
	FlagKubeconfig     = "kubeconfig"
)

// options are the check subcommand's settings.
type options struct {
	readyzURL      string
	address        string
	caFile         string
	serverName     string
	kube           kube.Options
	leaseNamespace string
	leases         cli.StringSlice
	timeout        time.Duration
	attempts       int
	skew           time.Duration
}

func (o *options) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagReadyzURL, Category: "Check", Destination: &o.readyzURL, Usage: "URL of the controller's /readyz (a Service's address and port, e.g. https://10.96.0.12:10271/readyz); must answer 200. Empty skips it"},
		&cli.StringFlag{Name: FlagReadyzAddress, Category: "Check", Destination: &o.address, Usage: "IP address (or host name) to connect to instead of resolving the URL's host, which still names the server for TLS: a Service's address from its environment variable, where no cluster DNS resolves the Service's name, IPv6 without brackets"},
		&cli.StringFlag{Name: FlagCAFile, Category: "Check", Destination: &o.caFile, Usage: "PEM CA bundle the /readyz server's certificate is verified with; empty accepts any certificate (the binaries' default certificate is self-signed at start)"},
		&cli.StringFlag{Name: FlagTLSServerName, Category: "Check", Destination: &o.serverName, Usage: "name the certificate must hold, with --" + FlagCAFile + "; empty means the URL's host"},
		&cli.StringFlag{Name: FlagLeaseNamespace, Category: "Check", Value: "kube-system", Destination: &o.leaseNamespace, Usage: "namespace of the Leases of --" + FlagLease},
		&cli.StringSliceFlag{Name: FlagLease, Category: "Check", Destination: &o.leases, Usage: "name of a Lease of the controller (repeat, or comma-separated, for every shard's); each must have a holder whose renewTime + leaseDurationSeconds is not past. Empty skips the Leases"},
		&cli.StringFlag{Name: FlagKubeconfig, Category: "Check", Destination: &o.kube.Kubeconfig, Usage: "path to a kubeconfig for reading the Leases; empty means in-cluster credentials"},
		&cli.DurationFlag{Name: FlagTimeout, Category: "Check", Value: 30 * time.Second, Destination: &o.timeout, Usage: "give up after this long in all, whatever attempts are left"},
		&cli.IntFlag{Name: FlagAttempts, Category: "Check", Value: 4, Destination: &o.attempts, Usage: "attempts before failing, 1 s apart then doubling (a Lease changing hands or a replica restarting passes on a later one)"},
		&cli.DurationFlag{Name: FlagClockSkew, Category: "Check", Value: 2 * time.Second, Destination: &o.skew, Usage: "how far this clock may be ahead of the controller's: a Lease counts as expired only once renewTime + leaseDurationSeconds + this is past"},
	}
}

func (o *options) validate() error {
	if o.readyzURL == "" && len(o.leases.Value()) == 0 {
		return fmt.Errorf("nothing to check: give --%s, --%s or both", FlagReadyzURL, FlagLease)
	}
	if o.readyzURL != "" {
		u, err := url.Parse(o.readyzURL)
		if err != nil {
			return &kube.FlagError{Flag: FlagReadyzURL, Err: err}
		}
		if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return &kube.FlagError{Flag: FlagReadyzURL, Err: fmt.Errorf("%q is not an http(s) URL with a host", o.readyzURL)}
		}
	}
	for _, n := range o.leases.Value() {
		if strings.TrimSpace(n) == "" {
			return &kube.FlagError{Flag: FlagLease, Err: errors.New("empty name")}
		}
	}
	switch {
	case o.timeout <= 0:
		return &kube.FlagError{Flag: FlagTimeout, Err: fmt.Errorf("%s must be positive", o.timeout)}
	case o.attempts < 1:
		return &kube.FlagError{Flag: FlagAttempts, Err: fmt.Errorf("%d must be at least 1", o.attempts)}
	case o.skew < 0:
		return &kube.FlagError{Flag: FlagClockSkew, Err: fmt.Errorf("%s is negative", o.skew)}
	}
	return nil
}

// Run is `<binary> check args...` for the binary named binary, at version: parse, build the
// clients, check until one attempt passes or the attempts or the time run out. It returns the
// exit code.
func Run(ctx context.Context, binary, version string, args []string, stderr io.Writer) int {
	o := &options{}
	flags := o.flags()
	cl, err := cmdline.Parse(binary+" "+Command, flags, args)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, Command, err)
		return cmdline.ExitUsage
	case cl.Help:
		cmdline.PrintHelp(stderr, binary+" "+Command, "check a running "+binary+": its /readyz answers 200 and its Lease has a live holder", version, cl.Flags)
		return cmdline.ExitOK
	case cl.Version:
		fmt.Fprintf(stderr, "%s version %s\n", binary, version)
		return cmdline.ExitOK
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, Command, err)
		return cmdline.ExitUsage
	}
	c := &checker{attempts: o.attempts, skew: o.skew, now: time.Now, readyzURL: o.readyzURL, leaseNamespace: o.leaseNamespace, leases: o.leases.Value()}
	if o.readyzURL != "" {
		if c.http, err = httpClient(o.caFile, o.serverName, o.address); err != nil {
			fmt.Fprintf(stderr, "%s %s: %v\n", binary, Command, err)
			return cmdline.ExitUsage
		}
	}
	if len(c.leases) > 0 {
		o.kube.UserAgent = kube.UserAgent(binary, version, Command)
		cfg, err := kube.RESTConfig(o.kube)
		if err != nil {
			fmt.Fprintf(stderr, "%s %s: %v\n", binary, Command, err)
			return cmdline.ExitUsage
		}
		cfg.Timeout = requestTimeout
		if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
			fmt.Fprintf(stderr, "%s %s: %v\n", binary, Command, err)
			return cmdline.ExitUsage
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	passed, err := c.run(ctx, func(attempt int, err error) {
		fmt.Fprintf(stderr, "%s %s: attempt %d/%d: %v\n", binary, Command, attempt, o.attempts, err)
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: FAIL: %v\n", binary, Command, err)
		return cmdline.ExitFailure
	}
	fmt.Fprintf(stderr, "%s %s: OK: %s\n", binary, Command, passed)
	return cmdline.ExitOK
}

// requestTimeout bounds each request of an attempt, so a server that accepts the
// connection and never answers costs one attempt, not the whole --timeout.
const requestTimeout = 5 * time.Second

// httpClient trusts caFile when given, else any certificate: the binaries' default
// certificate is self-signed at start, so nothing could verify it. A non-empty address is
// dialled instead of the URL's host (at the URL's port).
func httpClient(caFile, serverName, address string) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile == "" {
		cfg.InsecureSkipVerify = true //nolint:gosec // no CA given: the serving certificate is self-signed
	} else {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, &kube.FlagError{Flag: FlagCAFile, Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &kube.FlagError{Flag: FlagCAFile, Err: fmt.Errorf("%s holds no PEM certificate", caFile)}
		}
		cfg.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.Proxy = nil // a check of an in-cluster address never goes through a proxy
	if address != "" {
		dialer := &net.Dialer{Timeout: requestTimeout}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return dialer.DialContext(ctx, network, net.JoinHostPort(address, port))
		}
	}
	return &http.Client{Timeout: requestTimeout, Transport: tr}, nil
}

// checker checks /readyz and the Leases; an attempt passes when every part passes.
type checker struct {
	http           *http.Client
	client         kubernetes.Interface
	readyzURL      string
	leaseNamespace string
	leases         []string
	attempts       int
	skew           time.Duration
	now            func() time.Time
	// backoff is the wait before the second attempt, doubled after each; zero means 1 s.
	backoff time.Duration
}

// run makes up to c.attempts attempts while ctx lasts, calling failed after each failed one
// but the last; it returns what passed, or the last attempt's reason.
func (c *checker) run(ctx context.Context, failed func(attempt int, err error)) (string, error) {
	b := wait.Backoff{Duration: c.backoff, Factor: 2, Steps: c.attempts, Cap: 8 * time.Second}
	if b.Duration == 0 {
		b.Duration = time.Second
	}
	var last error
	for attempt := 1; ; attempt++ {
		passed, err := c.once(ctx)
		if err == nil {
			return passed, nil
		}
		last = err
		if attempt >= c.attempts {
			return "", last
		}
		failed(attempt, err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (then out of time)", last)
		case <-time.After(b.Step()):
		}
	}
}

// once is one attempt: /readyz, then each Lease. Every part is checked, so the reason names
// everything that failed (a controller scaled to 0 fails both), on one line.
func (c *checker) once(ctx context.Context) (string, error) {
	var ok, failed []string
	if c.readyzURL != "" {
		if err := c.readyz(ctx); err != nil {
			failed = append(failed, err.Error())
		} else {
			ok = append(ok, c.readyzURL+" answered 200")
		}
	}
	for _, name := range c.leases {
		if holder, err := c.lease(ctx, name); err != nil {
			failed = append(failed, err.Error())
		} else {
			ok = append(ok, fmt.Sprintf("Lease %s/%s held by %s", c.leaseNamespace, name, holder))
		}
	}
	if len(failed) > 0 {
		return "", errors.New(strings.Join(failed, "; "))
	}
	return strings.Join(ok, "; "), nil
}

// readyz GETs the URL: 200 passes; anything else fails with the status and the first line of
// the body (the binaries name the failing check in it).
func (c *checker) readyz(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.readyzURL, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", c.readyzURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	why := strings.Join(strings.Fields(string(body)), " ")
	if len(why) > 200 {
		why = why[:200] + "..."
	}
	hint := ""
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		hint = " (/readyz is not in the controller's --" + "authorization-always-allow-paths)"
	}
	return fmt.Errorf("GET %s: %s%s: %s", c.readyzURL, resp.Status, hint, why)
}

// lease reads the Lease and returns its holder if one holds it now: a holder whose last
// renewal plus the Lease's duration (plus the allowed clock skew) is not past.
func (c *checker) lease(ctx context.Context, name string) (string, error) {
	id := c.leaseNamespace + "/" + name
	l, err := c.client.CoordinationV1().Leases(c.leaseNamespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("lease %s does not exist: no replica has ever campaigned", id)
	case err != nil:
		return "", fmt.Errorf("reading Lease %s: %w", id, err)
	}
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		return "", fmt.Errorf("lease %s has no holder: no replica leads", id)
	}
	holder := *s.HolderIdentity
	if s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return "", fmt.Errorf("lease %s held by %s has no renewTime or leaseDurationSeconds", id, holder)
	}
	expires := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
	if now := c.now(); now.After(expires.Add(c.skew)) {
		return "", fmt.Errorf("lease %s held by %s expired %s ago (renewed %s, duration %ds): its holder stopped renewing",
			id, holder, now.Sub(expires).Round(time.Second), s.RenewTime.UTC().Format(time.RFC3339), *s.LeaseDurationSeconds)
	}
	return holder, nil
}
