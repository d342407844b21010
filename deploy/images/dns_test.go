package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A DNS server on loopback, UDP and TCP on one port, for the image's dig: it answers an A
// question for name (absolute, "probe.example.test.") with addr and any other with NXDOMAIN.
// It stops with the test.
func serveDNS(t *testing.T, name string, addr net.IP) int {
	t.Helper()
	// dig asks one port by UDP and by TCP. The kernel picks a free UDP port, and that port may
	// be taken for TCP by any other process (CI saw "address already in use"): try a bounded
	// number of ports.
	var (
		udp  net.PacketConn
		tcp  net.Listener
		port int
	)
	for attempt := 1; ; attempt++ {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", u.LocalAddr().String())
		if err == nil {
			udp, tcp, port = u, l, u.LocalAddr().(*net.UDPAddr).Port
			break
		}
		u.Close()
		if attempt == 20 {
			t.Fatalf("no loopback port free for both UDP and TCP after %d tries: %v", attempt, err)
		}
	}
	t.Cleanup(func() { udp.Close(); tcp.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, err := dnsAnswer(buf[:n], name, addr); err == nil {
				_, _ = udp.WriteTo(resp, from)
			}
		}
	}()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				resp, err := dnsAnswer(q, name, addr)
				if err != nil {
					return
				}
				_, _ = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...))
			}()
		}
	}()
	return port
}

// dnsAnswer is the response to query q (one question): an A record for name, else NXDOMAIN
// (with no record of any type, as a name that does not exist).
func dnsAnswer(q []byte, name string, addr net.IP) ([]byte, error) {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil, errors.New("not one question")
	}
	var labels []string
	i := 12
	for {
		if i >= len(q) {
			return nil, errors.New("short question")
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return nil, errors.New("bad label")
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return nil, errors.New("short question")
	}
	qtype := binary.BigEndian.Uint16(q[i : i+2])
	question := q[12 : i+4]
	var r bytes.Buffer
	r.Write(q[0:2])                           // the query's ID
	flags := uint16(0x8000 | 0x0400 | 0x0100) // a response, authoritative, recursion desired as asked
	found := strings.EqualFold(strings.Join(labels, ".")+".", name)
	if !found {
		flags |= 3 // NXDOMAIN
	}
	r.Write(binary.BigEndian.AppendUint16(nil, flags))
	an := uint16(0)
	if found && qtype == 1 {
		an = 1
	}
	for _, n := range []uint16{1, an, 0, 0} { // question, answer, authority, additional counts
		r.Write(binary.BigEndian.AppendUint16(nil, n))
	}
	r.Write(question)
	if an == 1 {
		r.Write([]byte{0xc0, 12})                      // the question's name
		r.Write([]byte{0, 1, 0, 1, 0, 0, 0, 30, 0, 4}) // A, IN, TTL 30, 4 bytes
		r.Write(addr.To4())
	}
	return r.Bytes(), nil
}

// The test server answers as a DNS server should: Go's own resolver, over UDP and TCP, finds
// the name's address, and no record for another name.
func TestDNSServer(t *testing.T) {
	port := serveDNS(t, "probe.example.test.", net.IPv4(192, 0, 2, 10))
	for _, network := range []string{"udp", "tcp"} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		addrs, err := r.LookupHost(ctx, "probe.example.test.")
		if err != nil || strings.Join(addrs, " ") != "192.0.2.10" {
			t.Errorf("%s: probe.example.test. is %q (%v), want 192.0.2.10", network, addrs, err)
		}
		_, err = r.LookupHost(ctx, "absent.example.test.")
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s: absent.example.test.: %v, want not found", network, err)
		}
		cancel()
	}
}
