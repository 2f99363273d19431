package resume

import (
	"context"
	"io"
	"sync"
	"time"
)

// step is what a connection's sender does next.
type step int

const (
	stepSend  step = iota // send the audio returned with it
	stepClose             // all audio is sent: half-close
	stepStop              // this connection is over (a new one resends from the buffer)
	stepFail              // the source failed: end the call
)

type entry struct {
	offset int // audio bytes of the stream before this piece
	data   []byte
}

func (e entry) end() int { return e.offset + len(e.data) }

// outbox holds the source's audio as read: what is not yet acknowledged (resent on a resume) and
// the acknowledged audio after the last final (resent when a lost session is redone). One sender
// at a time reads it, through next(); the receiving side acknowledges.
type outbox struct {
	mu             sync.Mutex
	cond           *sync.Cond
	source         Source
	maxUnacked     int // 0: keep nothing (no resume)
	pace           float64
	bytesPerSecond float64
	buffer         []entry // read and not acknowledged, in order
	redo           []entry // acknowledged after the last final
	redoBytes      int
	offset         int // audio bytes read from the source
	acked          int
	finalizedAt    int
	sentEnd        int // the current connection has been handed the audio up to here
	exhausted      bool
	failure        error
	epoch          int
	startedAt      time.Time // when the first audio went out (pacing)
}

func newOutbox(source Source, maxUnacked int, pace, bytesPerSecond float64) *outbox {
	o := &outbox{source: source, maxUnacked: maxUnacked, pace: pace, bytesPerSecond: bytesPerSecond}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *outbox) newEpoch() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch++
	o.cond.Broadcast()
	return o.epoch
}

// connect: connection `epoch` starts sending from the oldest unacknowledged byte.
func (o *outbox) connect(epoch int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if epoch == o.epoch {
		o.sentEnd = o.resumeOffsetLocked()
	}
}

func (o *outbox) resumeOffsetLocked() int {
	if len(o.buffer) > 0 {
		return o.buffer[0].offset
	}
	return o.offset
}

func (o *outbox) resumeOffset() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.resumeOffsetLocked()
}

func (o *outbox) ack(acked int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if acked > o.acked {
		o.acked = acked
	}
	o.release()
	o.cond.Broadcast()
}

// release moves acknowledged audio out of the buffer. Only what this connection was handed: a
// resumed stream must resend every byte from its resume offset, and acks logged before the drop
// may arrive first.
func (o *outbox) release() {
	limit := o.acked
	if o.sentEnd < limit {
		limit = o.sentEnd
	}
	for len(o.buffer) > 0 && o.buffer[0].end() <= limit {
		e := o.buffer[0]
		o.buffer = o.buffer[1:]
		if e.end() <= o.finalizedAt {
			continue
		}
		o.redo = append(o.redo, e)
		o.redoBytes += len(e.data)
		for len(o.redo) > 0 && o.redoBytes > o.maxUnacked {
			o.dropRedoHead()
		}
	}
}

func (o *outbox) dropRedoHead() {
	o.redoBytes -= len(o.redo[0].data)
	o.redo = o.redo[1:]
}

// finalized: final results came for the audio before stream offset `offset`.
func (o *outbox) finalized(offset int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if offset > o.finalizedAt {
		o.finalizedAt = offset
	}
	for len(o.redo) > 0 && o.redo[0].end() <= o.finalizedAt {
		o.dropRedoHead()
	}
}

func (o *outbox) finalizedOffset() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.finalizedAt
}

// restartAt: a new session takes over at stream offset `offset`. Returns where its audio starts
// (later when the audio from `offset` is no longer held).
func (o *outbox) restartAt(offset int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if offset > o.offset {
		offset = o.offset
	}
	var kept []entry
	for _, e := range o.redo {
		if e.end() > offset {
			kept = append(kept, e)
		}
	}
	o.buffer = append(kept, o.buffer...)
	o.redo, o.redoBytes = nil, 0
	o.finalizedAt, o.acked = offset, offset
	for len(o.buffer) > 0 && o.buffer[0].end() <= offset {
		o.buffer = o.buffer[1:]
	}
	if len(o.buffer) > 0 && o.buffer[0].offset < offset {
		head := o.buffer[0]
		o.buffer[0] = entry{offset, head.data[offset-head.offset:]}
	}
	return o.resumeOffsetLocked()
}

// finishedReading: the source is done and nothing read from it waits to be (re)sent.
func (o *outbox) finishedReading() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exhausted && len(o.buffer) == 0
}

func (o *outbox) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failure
}

// next is what the sender of connection `epoch` does: the held audio from its resume offset,
// then new audio from the source (paced), until the source ends or the connection is replaced.
func (o *outbox) next(ctx context.Context, epoch int) ([]byte, step) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		if epoch != o.epoch {
			return nil, stepStop
		}
		for _, e := range o.buffer {
			if e.offset >= o.sentEnd {
				o.sentEnd = e.end()
				o.release() // acks that came before it was sent
				o.started()
				return e.data, stepSend
			}
		}
		if o.exhausted {
			return nil, stepClose
		}
		if o.maxUnacked > 0 && o.offset-o.acked >= o.maxUnacked {
			o.cond.Wait() // backpressure: the server's acknowledgements catch up first
			continue
		}
		o.mu.Unlock()
		data, err := o.source() // outside the lock: a live source may block
		o.mu.Lock()
		if err == io.EOF {
			o.exhausted = true
			continue
		}
		if err != nil {
			o.failure = err
			return nil, stepFail
		}
		e := entry{o.offset, append([]byte(nil), data...)}
		o.offset = e.end()
		if len(data) == 0 {
			continue
		}
		o.waitPace(ctx, e)
		if o.maxUnacked == 0 { // no resume: nothing kept
			if epoch != o.epoch {
				return nil, stepStop
			}
			o.sentEnd = e.end()
			o.started()
			return e.data, stepSend
		}
		o.buffer = append(o.buffer, e)
	}
}

func (o *outbox) started() {
	if o.startedAt.IsZero() {
		o.startedAt = time.Now()
	}
}

// waitPace holds new audio until its time at `pace` x real time (the lock released meanwhile).
func (o *outbox) waitPace(ctx context.Context, e entry) {
	if o.pace <= 0 || o.startedAt.IsZero() {
		return
	}
	due := o.startedAt.Add(time.Duration(float64(e.offset) / o.bytesPerSecond / o.pace * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return
	}
	o.mu.Unlock()
	defer o.mu.Lock()
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	}
}
