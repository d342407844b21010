package v1alpha1

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// Client is a small typed client for IPAddressPools over the dynamic client.
type Client struct {
	res dynamic.NamespaceableResourceInterface
}

// NewClient wraps a dynamic client.
func NewClient(d dynamic.Interface) *Client {
	return &Client{res: d.Resource(GroupVersionResource)}
}

// Get reads one pool.
func (c *Client) Get(ctx context.Context, name string) (*IPAddressPool, error) {
	u, err := c.res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// Create creates a pool.
func (c *Client) Create(ctx context.Context, p *IPAddressPool) (*IPAddressPool, error) {
	u, err := ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// Update writes a pool's spec and metadata.
func (c *Client) Update(ctx context.Context, p *IPAddressPool) (*IPAddressPool, error) {
	u, err := ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// UpdateStatus writes a pool's status; the resourceVersion in p guards against lost updates.
func (c *Client) UpdateStatus(ctx context.Context, p *IPAddressPool) (*IPAddressPool, error) {
	u, err := ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	out, err := c.res.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// Delete deletes a pool.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.res.Delete(ctx, name, metav1.DeleteOptions{})
}
