package pvbinder

// The informers' event handlers: each queues the objects an event concerns, and wakes the
// claims a volume that became Available could serve.

import (
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

func (c *Controller) onVolume(obj any) {
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok {
		return
	}
	c.volumeQueue.Add(pv.Name)
	switch {
	case pv.Spec.ClaimRef != nil:
		// Pre-bound (by a user, the scheduler or a provisioner) or being bound: the claim
		// completes the bind; do not wait for the volume sync to tell it.
		c.claimQueue.Add(refKey(pv.Spec.ClaimRef))
	case pv.Status.Phase == v1.VolumeAvailable && pv.DeletionTimestamp == nil:
		latest, _ := c.volumes.Latest(pv.Name, pv)
		c.queueWaitingClaimFor(latest)
	}
}

func (c *Controller) onVolumeDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok {
		return
	}
	c.volumes.Forget(pv.Name)
	// A deletion under way ends: upstream's end to end delete latency.
	c.ops.end(pv.Name, nil)
	// The claim bound to it is Lost now.
	if pv.Spec.ClaimRef != nil {
		c.claimQueue.Add(refKey(pv.Spec.ClaimRef))
	}
}

// onPodAdd brings up the unbound claims a new Pod waiting to be scheduled uses, so their
// WaitForPodScheduled event names it without waiting for the resync.
func (c *Controller) onPodAdd(obj any) {
	c.onRecyclerPod(obj)
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName != "" || podTerminated(pod) {
		return
	}
	keys, _ := podClaimKeys(pod)
	for _, key := range keys {
		if claim, err := c.claim(key); err == nil && claim.Spec.VolumeName == "" {
			c.claimQueue.Add(key)
		}
	}
}

// onRecyclerPod queues the PV a recycler Pod scrubs, whose recycle goes on with the Pod's
// progress.
func (c *Controller) onRecyclerPod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pod, ok := obj.(*v1.Pod); ok {
		if name := recycledVolume(pod); name != "" {
			c.volumeQueue.Add(name)
		}
	}
}

func (c *Controller) onClaimAdd(obj any) {
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	c.claimQueue.Add(claimKey(claim.Namespace, claim.Name))
}

func (c *Controller) onClaimUpdate(old, cur any) {
	o, ok1 := old.(*v1.PersistentVolumeClaim)
	n, ok2 := cur.(*v1.PersistentVolumeClaim)
	if !ok1 || !ok2 {
		return
	}
	if o.Status.Phase != v1.ClaimBound && n.Status.Phase == v1.ClaimBound {
		c.metrics.bindLatency.Observe(time.Since(n.CreationTimestamp.Time).Seconds())
	}
	c.claimQueue.Add(claimKey(n.Namespace, n.Name))
}

func (c *Controller) onClaimDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	key := claimKey(claim.Namespace, claim.Name)
	c.claims.Forget(key)
	c.waiting.remove(key)
	c.ops.forget(key)
	c.forgetRebindRefusal(claim.UID)
	// Its volume is Released now (or, if a bind was under way, the reservation undone).
	if claim.Spec.VolumeName != "" {
		c.volumeQueue.Add(claim.Spec.VolumeName)
	}
	c.claimQueue.Add(key) // clears anything left about the key
}

// onClass queues the unbound claims a new or changed class may concern: a new default
// class is applied to class-less claims, and binding mode or provisioner decide what
// happens to claims of the class.
func (c *Controller) onClass(obj any) {
	class, ok := obj.(*storagev1.StorageClass)
	if !ok {
		return
	}
	claims, err := c.claimLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, claim := range claims {
		if claim.Spec.VolumeName != "" || claim.Status.Phase == v1.ClaimBound {
			continue
		}
		if !storagehelpers.PersistentVolumeClaimHasClass(claim) || storagehelpers.GetPersistentVolumeClaimClass(claim) == class.Name {
			c.claimQueue.Add(claimKey(claim.Namespace, claim.Name))
		}
	}
}

// queueWaitingClaimFor queues the oldest waiting claim an Available PV could serve.
func (c *Controller) queueWaitingClaimFor(pv *v1.PersistentVolume) {
	if pv.Spec.ClaimRef != nil || pv.Status.Phase != v1.VolumeAvailable || pv.DeletionTimestamp != nil {
		return
	}
	key := c.waiting.takeOldest(func(key string) bool {
		claim, err := c.claim(key)
		return err == nil && couldServe(pv, claim)
	})
	if key != "" {
		c.claimQueue.Add(key)
	}
}

// queueOldestWaitingClaim queues the oldest waiting claim. Called after each bind: if PVs freed up or
// arrived while claims waited, the chain of binds works through them in creation order.
func (c *Controller) queueOldestWaitingClaim() {
	if key := c.waiting.takeOldest(nil); key != "" {
		c.claimQueue.Add(key)
	}
}
