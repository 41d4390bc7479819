package host

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"time"
)

// Default intervals of a HealthWatch.
const (
	// DefaultHealthPoll is how often a HealthWatch reads the cheap signs of each watched
	// function (on the bus, driver, AER totals): a change is in the health files within this
	// and one check.
	DefaultHealthPoll = time.Second
	// DefaultHealthFull is how often it checks every watched function in full regardless.
	DefaultHealthFull = 5 * time.Minute
)

// healthSign is what the fast poll reads of one function: a stat, a readlink and the three
// aer_dev_* files, so that polling every second costs little (BenchmarkHealthPoll).
type healthSign struct {
	onBus  bool
	driver string
	aer    AERCounts
}

func signOf(root Root, a Address) healthSign {
	s := healthSign{onBus: OnBus(root, a)}
	if !s.onBus {
		return s
	}
	if d, err := Driver(root, a); err == nil || errors.Is(err, fs.ErrNotExist) {
		s.driver = d
	}
	if c, ok, err := ReadAER(root, a); ok && err == nil {
		s.aer = c
	}
	return s
}

// HealthWatch keeps the health files of the functions vgpu-host watches (those with one)
// current, as the agent runs it: a full check (ObserveAll) at start, every Full, whenever the
// fast poll sees a function leave or return to the bus, change driver or count a new AER
// error, and after every Xid event handed to it. Like ObserveAll it never resets or
// quarantines: the function may be in a running guest.
type HealthWatch struct {
	Root Root
	// Poll and Full are the intervals (defaults DefaultHealthPoll, DefaultHealthFull).
	Poll, Full time.Duration
	// Checked, when set, is called with each full check's results (the agent logs them).
	Checked func([]DeviceHealth, error)
	// Xid, when set, is called after an Xid event is recorded, with the error of recording it.
	Xid func(XidEvent, error)

	xids chan XidEvent
}

// NewHealthWatch returns a watch of root with the default intervals.
func NewHealthWatch(root Root) *HealthWatch {
	return &HealthWatch{Root: root, Poll: DefaultHealthPoll, Full: DefaultHealthFull, xids: make(chan XidEvent, 64)}
}

// Xids is where Xid events are handed to the watch (the NVML watcher sends them): each is
// recorded in its GPU's health file (RecordXid) and the GPUs checked at once. The one
// goroutine of Run writes the health files, so a record and a check never lose each other's
// update.
func (w *HealthWatch) Xids() chan<- XidEvent { return w.xids }

// Run watches until ctx ends.
func (w *HealthWatch) Run(ctx context.Context) {
	poll, full := w.Poll, w.Full
	if poll <= 0 {
		poll = DefaultHealthPoll
	}
	if full <= 0 {
		full = DefaultHealthFull
	}
	signs := map[Address]healthSign{}
	var lastFull time.Time
	check := func() {
		signs = w.signs()
		hs, err := ObserveAll(w.Root, time.Now().UTC())
		lastFull = time.Now()
		if w.Checked != nil {
			w.Checked(hs, err)
		}
	}
	check()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-w.xids:
			err := RecordXid(w.Root, e)
			if w.Xid != nil {
				w.Xid(e, err)
			}
			// Several events at once (an Xid on every MIG instance) make one check.
			for drained := false; !drained; {
				select {
				case e := <-w.xids:
					err := RecordXid(w.Root, e)
					if w.Xid != nil {
						w.Xid(e, err)
					}
				default:
					drained = true
				}
			}
			check()
		case <-tick.C:
			if time.Since(lastFull) >= full || !maps.Equal(w.signs(), signs) {
				check()
			}
		}
	}
}

// signs reads the fast signs of every function with a health file.
func (w *HealthWatch) signs() map[Address]healthSign {
	addrs, _ := stateAddrs(w.Root, "health")
	out := make(map[Address]healthSign, len(addrs))
	for _, a := range addrs {
		out[a] = signOf(w.Root, a)
	}
	return out
}
