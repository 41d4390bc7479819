// Package metrics is the agent's Prometheus metrics (docs/metrics.md lists every one): what the
// host offers (per-GPU info, mdev instances available and used per parent and type), who holds
// what (allocations per VM and kind, from the ledger), how the agent's operations go (duration
// histograms and error counters per operation), drift between the ledger and libvirt, and the
// last boot reconcile.
//
// The host and the ledger are read at scrape time through their one reader each (ops.Inventory,
// ledger.Read), never cached here, so a scrape shows the host as it is. Operation, drift and
// reconcile metrics are pushed by the agent as they happen. Metrics has its own registry: the
// agent serves it on its socket and, when asked, on TCP (Handler).
package metrics

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// Namespace prefixes every metric name.
const Namespace = "vgpuhost"

// Source is what the scrape-time collectors read: the host's inventory and the allocation
// ledger. HostSource reads them from a host root; the agent may pass its own.
type Source interface {
	Inventory() (*host.Inventory, error)
	Allocations() (*ledger.Book, error)
}

// HostSource reads the inventory (ops.Inventory, the host alone) and the ledger (ledger.Open(Root).Read) of Root.
type HostSource struct{ Root host.Root }

// Inventory implements Source.
func (s HostSource) Inventory() (*host.Inventory, error) {
	res, err := ops.Inventory(context.Background(), ops.Env{Root: s.Root}, ops.InventoryRequest{HostOnly: true})
	if err != nil {
		return nil, err
	}
	return res.Inventory.Inventory, nil
}

// Allocations implements Source.
func (s HostSource) Allocations() (*ledger.Book, error) { return ledger.Open(s.Root).Read() }

// HealthSource is what a Source also offers when it can read the devices' health files and
// quarantine records (docs/health.md); HostSource does. A Source without it has no health
// metrics.
type HealthSource interface {
	Health() ([]host.HealthState, []host.Quarantine, error)
}

// Health implements HealthSource.
func (s HostSource) Health() ([]host.HealthState, []host.Quarantine, error) {
	st, err := host.HealthStates(s.Root)
	if err != nil {
		return nil, nil, err
	}
	qs, err := host.Quarantines(s.Root)
	return st, qs, err
}

// Metrics is the agent's metrics and their registry.
type Metrics struct {
	reg *prometheus.Registry

	opDuration *prometheus.HistogramVec
	opErrors   *prometheus.CounterVec

	driftEvents  *prometheus.CounterVec
	driftCurrent *prometheus.GaugeVec
	mu           sync.Mutex
	drifts       map[[2]string]bool

	reconcileSteps        *prometheus.GaugeVec
	reconcileKindDuration *prometheus.GaugeVec
	reconcileDuration     prometheus.Gauge
	reconcileLast         prometheus.Gauge
}

// OpBuckets are the operation duration buckets, in seconds: sysfs writes take a millisecond,
// an apply under TCG a few seconds, enabling VFs on a large GPU tens of seconds.
var OpBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// New makes the metrics with their own registry, reading the host and the ledger through src
// at every scrape. It also registers the Go runtime and process collectors.
func New(src Source) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "operation_duration_seconds",
			Help:    "Duration of the agent's operations (apply, destroy, bind, mdev-create, reconcile, ...), errors included.",
			Buckets: OpBuckets,
		}, []string{"op"}),
		opErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "operation_errors_total",
			Help: "Operations of the agent that returned an error.",
		}, []string{"op"}),
		driftEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "drift_events_total",
			Help: "Drift seen between the allocation ledger and libvirt (a domain undefined, a device detached outside vgpu-host), by kind.",
		}, []string{"kind"}),
		driftCurrent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "drift_current",
			Help: "1 for each drift not yet resolved, by VM and kind.",
		}, []string{"vm", "kind"}),
		drifts: map[[2]string]bool{},
		reconcileSteps: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "reconcile_steps",
			Help: "Steps of the last boot reconcile by kind (sriov, vendor-vgpu, mdev, vfio) and result (applied, already, skipped, failed).",
		}, []string{"kind", "result"}),
		reconcileKindDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "reconcile_kind_duration_seconds",
			Help: "Time the steps of each kind took in the last boot reconcile.",
		}, []string{"kind"}),
		reconcileDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "reconcile_duration_seconds",
			Help: "Duration of the last boot reconcile.",
		}),
		reconcileLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "reconcile_last_timestamp_seconds",
			Help: "When the last boot reconcile ended (Unix time); 0 before the first.",
		}),
	}
	m.reg.MustRegister(m.opDuration, m.opErrors, m.driftEvents, m.driftCurrent,
		m.reconcileSteps, m.reconcileKindDuration, m.reconcileDuration, m.reconcileLast,
		&hostCollector{src: src},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry (for tests and for an agent that adds its own collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' text (or OpenMetrics) format. A source that
// cannot be read does not fail the scrape: vgpuhost_source_up says so.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// ObserveOp records one operation: its duration and, if err is not nil, an error.
func (m *Metrics) ObserveOp(op string, d time.Duration, err error) {
	m.opDuration.WithLabelValues(op).Observe(d.Seconds())
	c := m.opErrors.WithLabelValues(op) // present at 0 once the op has run
	if err != nil {
		c.Inc()
	}
}

// Drift records a drift of vm (kind: "domain-undefined", "device-detached", ...): one event,
// and the drift is current until ResolveDrift. Seeing the same current drift again is not a
// new event.
func (m *Metrics) Drift(vm, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{vm, kind}
	if m.drifts[k] {
		return
	}
	m.drifts[k] = true
	m.driftEvents.WithLabelValues(kind).Inc()
	m.driftCurrent.WithLabelValues(vm, kind).Set(1)
}

// ResolveDrift ends a current drift (its allocation was released, or the domain is back).
func (m *Metrics) ResolveDrift(vm, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.drifts, [2]string{vm, kind})
	m.driftCurrent.DeleteLabelValues(vm, kind)
}

// Reconcile records a boot reconcile's result: steps per kind and result (every combination,
// 0 included, so a query for failed steps always has a series), time per kind, the whole
// duration and when it ended.
func (m *Metrics) Reconcile(r reconcile.Result) {
	for _, k := range reconcile.Kinds {
		for _, res := range reconcile.Results {
			m.reconcileSteps.WithLabelValues(k, res).Set(float64(r.Count(k, res)))
		}
		m.reconcileKindDuration.WithLabelValues(k).Set(r.KindDuration(k).Seconds())
	}
	m.reconcileDuration.Set(r.Duration.Seconds())
	m.reconcileLast.Set(float64(r.Started.Add(r.Duration).UnixNano()) / 1e9)
}

// hostCollector reads the host and the ledger at each scrape.
type hostCollector struct{ src Source }

var (
	gpuInfoDesc = prometheus.NewDesc(Namespace+"_gpu_info",
		"One series per GPU function (class 03xx, VFs included) with what the host says about it; mode is how it is used: passthrough (on vfio-pci), sriov-vf, vendor-vfio, mdev (an mdev parent), sriov-pf (VFs enabled), host (a host driver) or unbound.",
		[]string{"address", "vendor", "device", "driver", "numa_node", "mode"}, nil)
	mdevAvailDesc = prometheus.NewDesc(Namespace+"_mdev_available_instances",
		"Instances of an mdev type its parent can still create (available_instances).",
		[]string{"parent", "type", "type_name"}, nil)
	mdevUsedDesc = prometheus.NewDesc(Namespace+"_mdev_used_instances",
		"Instances of an mdev type that exist on its parent.",
		[]string{"parent", "type", "type_name"}, nil)
	allocDesc = prometheus.NewDesc(Namespace+"_allocations",
		"Devices the allocation ledger gives each VM, by kind (pci, mdev, vendor-vgpu).",
		[]string{"vm", "kind"}, nil)
	sourceUpDesc = prometheus.NewDesc(Namespace+"_source_up",
		"1 when the scrape could read the source (inventory: the host's sysfs; ledger: the allocation ledger; health: the health files and quarantine records), 0 when it could not (the agent logs why).",
		[]string{"source"}, nil)
	healthDesc = prometheus.NewDesc(Namespace+"_device_health",
		"One series per device vgpu-host has checked: 1 when its last check was healthy and it is not quarantined, else 0; reason is ok, or the failed checks (config-all-ones, bar, aer-fatal, link-degraded, reset-failed, ...) joined by commas.",
		[]string{"address", "reason"}, nil)
	resetsDesc = prometheus.NewDesc(Namespace+"_device_resets_total",
		"Resets vgpu-host made of a device through the kernel's reset attribute that succeeded, by method (flr, pm, bus, device_specific, ...).",
		[]string{"address", "method"}, nil)
	aerDesc = prometheus.NewDesc(Namespace+"_aer_errors_total",
		"A device's AER error totals as its last check read them (the kernel's TOTAL_ERR_* since boot), by severity (correctable, nonfatal, fatal).",
		[]string{"address", "severity"}, nil)
	xidDesc = prometheus.NewDesc(Namespace+"_nvidia_xid_total",
		"NVIDIA Xid errors NVML reported for a GPU since vgpu-host began watching it (kept across agent restarts in its health file), by Xid number; docs/health.md says which Xids make the GPU unhealthy.",
		[]string{"address", "xid"}, nil)
)

// Describe implements prometheus.Collector.
func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuInfoDesc, mdevAvailDesc, mdevUsedDesc, allocDesc, sourceUpDesc, healthDesc, resetsDesc, aerDesc, xidDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	inv, err := c.src.Inventory()
	ch <- prometheus.MustNewConstMetric(sourceUpDesc, prometheus.GaugeValue, up(err), "inventory")
	if inv != nil {
		for _, d := range inv.Devices {
			if !d.IsGPU {
				continue
			}
			ch <- prometheus.MustNewConstMetric(gpuInfoDesc, prometheus.GaugeValue, 1,
				d.Address.String(), d.VendorID, d.DeviceID, d.Driver, strconv.Itoa(d.NUMANode), string(ModeOf(d)))
		}
		for _, p := range inv.MdevParents {
			for _, t := range p.Types {
				ch <- prometheus.MustNewConstMetric(mdevAvailDesc, prometheus.GaugeValue, float64(t.AvailableInstances), p.Parent, t.ID, t.Name)
				ch <- prometheus.MustNewConstMetric(mdevUsedDesc, prometheus.GaugeValue, float64(len(t.Instances)), p.Parent, t.ID, t.Name)
			}
		}
	}
	c.collectHealth(ch)
	book, err := c.src.Allocations()
	ch <- prometheus.MustNewConstMetric(sourceUpDesc, prometheus.GaugeValue, up(err), "ledger")
	if book != nil {
		for _, name := range book.Names() {
			vm := book.VM(name)
			n := map[ledger.ClaimKind]int{}
			for _, cl := range vm.Claims {
				n[cl.Kind]++
			}
			for kind, count := range n {
				ch <- prometheus.MustNewConstMetric(allocDesc, prometheus.GaugeValue, float64(count), name, string(kind))
			}
		}
	}
}

// collectHealth reads the health files and quarantine records, when the source can.
func (c *hostCollector) collectHealth(ch chan<- prometheus.Metric) {
	hs, ok := c.src.(HealthSource)
	if !ok {
		return
	}
	states, qs, err := hs.Health()
	ch <- prometheus.MustNewConstMetric(sourceUpDesc, prometheus.GaugeValue, up(err), "health")
	quarantined := map[host.Address]host.Quarantine{}
	for _, q := range qs {
		quarantined[q.Address] = q
	}
	seen := map[host.Address]bool{}
	for _, st := range states {
		a := st.Address.String()
		seen[st.Address] = true
		var problems []host.Problem
		if st.Last != nil {
			problems = st.Last.Problems
		}
		q, isQ := quarantined[st.Address]
		if isQ && len(problems) == 0 {
			problems = q.Problems
		}
		ch <- healthMetric(a, problems, isQ)
		for x, n := range st.Xid {
			ch <- prometheus.MustNewConstMetric(xidDesc, prometheus.CounterValue, float64(n), a, x)
		}
		for m, n := range st.Resets {
			ch <- prometheus.MustNewConstMetric(resetsDesc, prometheus.CounterValue, float64(n), a, m)
		}
		if st.Last != nil && st.Last.AER != nil {
			ch <- prometheus.MustNewConstMetric(aerDesc, prometheus.CounterValue, float64(st.Last.AER.Correctable), a, "correctable")
			ch <- prometheus.MustNewConstMetric(aerDesc, prometheus.CounterValue, float64(st.Last.AER.NonFatal), a, "nonfatal")
			ch <- prometheus.MustNewConstMetric(aerDesc, prometheus.CounterValue, float64(st.Last.AER.Fatal), a, "fatal")
		}
	}
	for _, q := range qs {
		if !seen[q.Address] {
			ch <- healthMetric(q.Address.String(), q.Problems, true)
		}
	}
}

// healthMetric is one device's vgpuhost_device_health series.
func healthMetric(addr string, problems []host.Problem, quarantined bool) prometheus.Metric {
	var names []string
	for _, p := range problems {
		if !slices.Contains(names, p.Check) {
			names = append(names, p.Check)
		}
	}
	reason, v := strings.Join(names, ","), 0.0
	switch {
	case reason == "" && quarantined:
		reason = "quarantined"
	case reason == "":
		reason, v = "ok", 1
	}
	return prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, v, addr, reason)
}

func up(err error) float64 {
	if err != nil {
		return 0
	}
	return 1
}

// Mode is how a GPU function is used: gpu_info's "mode" label. It is not a vgpu.Kind, which
// names what a guest gets, but a function set up to give guests one kind is labelled with that
// kind's name (ModeOfKind): passthrough (on vfio-pci), sriov-vf, vendor-vfio, mdev (an mdev
// parent). A function that gives guests nothing is in a host-side state: ModeSRIOVPF,
// ModeHost or ModeUnbound.
type Mode string

// The host-side modes.
const (
	// ModeSRIOVPF is a physical function with SR-IOV VFs enabled: its VFs are what guests get.
	ModeSRIOVPF Mode = "sriov-pf"
	// ModeHost is a function on a host driver (nvidia, amdgpu, i915, …).
	ModeHost Mode = "host"
	// ModeUnbound is a function on no driver.
	ModeUnbound Mode = "unbound"
)

// ModeOfKind is the mode of a function set up to give guests kind k: the kind's own name.
func ModeOfKind(k vgpu.Kind) Mode { return Mode(k) }

// ModeOf says how a GPU function is used, from the inventory's facts.
func ModeOf(d host.Device) Mode {
	switch {
	case d.VendorVGPU != nil:
		return ModeOfKind(vgpu.VendorVFIO)
	case d.PhysFn != nil:
		return ModeOfKind(vgpu.SRIOVVF)
	case d.Driver == vfio.DriverName:
		return ModeOfKind(vgpu.Passthrough)
	case d.Mdev != nil:
		return ModeOfKind(vgpu.Mdev)
	case d.SRIOV != nil && d.SRIOV.NumVFs > 0:
		return ModeSRIOVPF
	case d.Driver == "":
		return ModeUnbound
	}
	return ModeHost
}
