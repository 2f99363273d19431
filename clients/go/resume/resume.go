// Package resume streams audio to voxgate.v1.Speech/StreamingRecognize and carries the call
// through what ends a connection but not the call: the behaviour of the Python client's
// voxgate_client.resume.
//
//   - A dropped connection (Unavailable before the session's `ended`) is resumed: Stream
//     reconnects with backoff for as long as the server holds the session, presents the session's resume token, the last seq it received
//     and the offset it resends audio from (the last acknowledged one), and resends what it
//     kept. Results are de-duplicated by result id. SESSION_ATTACHED (the server has not seen
//     the old connection go yet) is retried too.
//   - SessionEnded{DRAINING} with audio left: a new session with the same config on the same
//     target (a balancer picks another instance), from where the drained one stopped.
//   - SESSION_NOT_FOUND after the session heard audio (its server process died, e.g. a crashed
//     worker of `voxgate serve --workers N`): a new session redoes the audio from the end of
//     the last final result; the acknowledged audio after that final is kept for this.
//
// The caller sees one stream: after a seam a second `started`, then seq, utterance_index and
// every audio offset continue those of the sessions before. Memory is bounded: at most
// MaxUnackedBytes of unacknowledged audio (reading the source waits beyond it) and as much
// again of acknowledged audio after the last final.
package resume

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "voxgate.dev/clients/go/voxgatev1"
)

// Policy says how Stream reconnects.
type Policy struct {
	// ReconnectWindow: how long one disconnect is retried (reset by a response); 0: as long as the
	// server holds the session, its SessionStarted.resume_window (30 s on a default server).
	ReconnectWindow     time.Duration
	MaxAttempts         int           // also a cap on reconnects in a row for one disconnect; 0: none but the window
	Backoff             time.Duration // the first pause between attempts, doubled each time ...
	MaxBackoff          time.Duration // ... up to this
	MaxUnackedBytes     int           // audio kept unacknowledged; reading the source waits beyond it
	FlowStatusInterval  time.Duration // how often the server acknowledges audio
	ReconnectOnDrain    bool          // after SessionEnded{DRAINING} with audio left: a new session
	RestartLostSessions bool          // a session lost with its server process: redo it from its last final
	AttachedWait        time.Duration // how long SESSION_ATTACHED is retried
}

// DefaultPolicy is the Python client's ResumePolicy().
func DefaultPolicy() Policy {
	return Policy{
		Backoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second,
		MaxUnackedBytes: 4194304, FlowStatusInterval: 200 * time.Millisecond,
		ReconnectOnDrain: true, RestartLostSessions: true, AttachedWait: 60 * time.Second,
	}
}

// defaultResumeWindow is a voxgate server's default resume window: assumed until a session tells its own.
const defaultResumeWindow = 30 * time.Second

// Source gives the stream's audio one piece at a time in the configured encoding; io.EOF ends it.
type Source func() ([]byte, error)

// Options of a Stream.
type Options struct {
	Pace   float64 // speed against real time (1: real time); 0: as fast as flow control allows
	Resume *Policy // nil: one connection, whose end is the end
	// OnResponse gets every response the caller sees (FlowStatus only when the config asks for it).
	OnResponse  func(*pb.StreamingRecognizeResponse)
	CallOptions []grpc.CallOption
}

var bytesPerSample = map[pb.AudioEncoding]int{
	pb.AudioEncoding_AUDIO_ENCODING_LINEAR16: 2,
	pb.AudioEncoding_AUDIO_ENCODING_MULAW:    1,
	pb.AudioEncoding_AUDIO_ENCODING_ALAW:     1,
}

// Stream sends `config`, then the source's audio, then half-closes, passing each response to
// opts.OnResponse. It returns nil when the (last) session ends and the server closes with OK,
// else the call's error (or the source's own).
func Stream(ctx context.Context, client pb.SpeechClient, config *pb.StreamingConfig, source Source, opts Options) error {
	perSample, ok := bytesPerSample[config.GetEncoding()]
	if !ok {
		return errors.New("resume: a raw encoding is needed (LINEAR16, MULAW, ALAW)")
	}
	channels := int(config.GetAudioChannelCount())
	if channels < 1 {
		channels = 1
	}
	frame := perSample * channels
	policy := opts.Resume
	maxUnacked := 0 // no resume: nothing kept
	if policy != nil {
		if policy.MaxAttempts < 0 || policy.ReconnectWindow < 0 || policy.MaxUnackedBytes <= 0 {
			return errors.New("resume: MaxAttempts >= 0, ReconnectWindow >= 0 and MaxUnackedBytes > 0 are required")
		}
		maxUnacked = policy.MaxUnackedBytes
	}
	out := newOutbox(source, maxUnacked, opts.Pace, float64(int(config.GetSampleRateHz())*frame))
	r := newResumer(config, policy, out, frame)
	for {
		epoch := out.newEpoch()
		r.connecting()
		err := connection(ctx, client, r.request, out, epoch, r, opts)
		if err != nil {
			delay, giveUp := r.delayAfter(err)
			if giveUp != nil {
				return giveUp
			}
			if delay >= 0 {
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return ctx.Err()
				}
				r.reconnecting()
				continue
			}
		}
		if !r.nextSession() {
			return nil
		}
	}
}

// connection runs one call: the sender in a goroutine, the responses here. nil: closed with OK.
func connection(ctx context.Context, client pb.SpeechClient, first *pb.StreamingConfig, out *outbox, epoch int,
	r *resumer, opts Options) error {
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamingRecognize(callCtx, opts.CallOptions...)
	if err != nil {
		return err
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		send(callCtx, cancel, stream, first, out, epoch)
	}()
	defer func() {
		out.newEpoch() // the sender stops at its next step ...
		cancel()       // ... or now, if it is blocked in Send
		<-sent         // one sender at a time reads the source
	}()
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if r.passes(resp) && opts.OnResponse != nil {
			opts.OnResponse(resp)
		}
	}
}

func send(ctx context.Context, cancel context.CancelFunc, stream pb.Speech_StreamingRecognizeClient,
	first *pb.StreamingConfig, out *outbox, epoch int) {
	if stream.Send(&pb.StreamingRecognizeRequest{Request: &pb.StreamingRecognizeRequest_Config{Config: first}}) != nil {
		return
	}
	out.connect(epoch)
	for {
		data, step := out.next(ctx, epoch)
		switch step {
		case stepClose:
			_ = stream.CloseSend()
			return
		case stepFail:
			cancel() // the source failed: the call ends, and Stream returns the source's error
			return
		case stepStop:
			return
		}
		if stream.Send(&pb.StreamingRecognizeRequest{Request: &pb.StreamingRecognizeRequest_Audio{Audio: data}}) != nil {
			return // the call is over: Recv reports its status
		}
	}
}

// errorReason is the call's google.rpc.ErrorInfo reason ("" without one).
func errorReason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// connectionLost: Unavailable, or a Canceled the server never sends (a proxy resetting the stream).
func connectionLost(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.Canceled:
		return errorReason(err) == ""
	}
	return false
}

// resumer holds the decisions of a stream: what the caller sees, whether and when to reconnect,
// and the first request of each connection.
type resumer struct {
	config         *pb.StreamingConfig
	policy         *Policy
	out            *outbox
	timeline       timeline
	oneRecognition bool // its finals mark where a lost session is redone from
	callerFlow     bool // the caller asked for FlowStatus itself
	request        *pb.StreamingConfig

	token          string
	lastSeq        uint64 // of the current session
	finalIDs       map[string]bool
	failures       int
	lostSince      time.Time     // the first failed reconnect of this disconnect
	resumeWindow   time.Duration // the session's, once its SessionStarted came
	attachedSince  time.Time
	attachedTries  int
	reopening      bool
	heard          bool
	ended, drained bool
	endedOK        bool
	processed      int
}

func newResumer(config *pb.StreamingConfig, policy *Policy, out *outbox, frame int) *resumer {
	r := &resumer{
		config: config, policy: policy, out: out,
		timeline:       timeline{rate: int64(config.GetSampleRateHz()), frame: frame},
		oneRecognition: config.GetAudioChannelCount() <= 1 || config.GetChannelMode() != pb.ChannelMode_CHANNEL_MODE_SEPARATE,
		callerFlow:     config.GetFlowStatus().GetEnabled(),
		finalIDs:       map[string]bool{},
		resumeWindow:   defaultResumeWindow,
	}
	r.request = r.firstConfig()
	return r
}

func (r *resumer) firstConfig() *pb.StreamingConfig {
	if r.policy == nil {
		return r.config
	}
	c := proto.Clone(r.config).(*pb.StreamingConfig) // FlowStatus on; the caller's config is not changed
	c.FlowStatus = &pb.FlowStatusConfig{Enabled: true, IntervalMs: int32(r.policy.FlowStatusInterval / time.Millisecond)}
	return c
}

func (r *resumer) connecting() {
	r.ended, r.drained, r.endedOK, r.processed = false, false, false, 0
}

// passes takes in a response; whether the caller sees it (shifted onto the stream's timeline).
func (r *resumer) passes(resp *pb.StreamingRecognizeResponse) bool {
	if ended := resp.GetEnded(); ended != nil {
		r.ended = true
		reason := ended.GetReason()
		r.endedOK = reason != pb.SessionEndReason_SESSION_END_REASON_ERROR &&
			reason != pb.SessionEndReason_SESSION_END_REASON_ENGINE_LOST
		r.drained = reason == pb.SessionEndReason_SESSION_END_REASON_DRAINING
		r.processed = r.timeline.bytesOf(ended.GetAudioDuration())
	}
	if r.policy == nil {
		return true // one connection, one session: nothing to skip or shift
	}
	r.failures, r.lostSince, r.attachedSince, r.attachedTries = 0, time.Time{}, time.Time{}, 0
	if seq := resp.GetSeq(); seq != 0 && seq <= r.lastSeq {
		return false // delivered before the reconnect
	} else if seq > r.lastSeq {
		r.lastSeq = seq
	}
	switch m := resp.GetResponse().(type) {
	case *pb.StreamingRecognizeResponse_Started:
		if m.Started.GetResumed() {
			return false // the same session goes on
		}
		if t := m.Started.GetResumeToken(); t != "" {
			r.token = t
		}
		if w := m.Started.GetResumeWindow(); w != nil {
			r.resumeWindow = w.AsDuration()
		}
	case *pb.StreamingRecognizeResponse_FlowStatus:
		acked := int(m.FlowStatus.GetAckedAudioBytes())
		r.heard = r.heard || acked > 0
		r.out.ack(r.timeline.audioBytes + acked)
	case *pb.StreamingRecognizeResponse_Result:
		r.heard = true
		id := m.Result.GetResultId()
		if r.finalIDs[id] {
			return false // its utterance is already final
		}
		if m.Result.GetIsFinal() {
			r.finalIDs[id] = true
		}
	}
	r.timeline.apply(resp)
	if res := resp.GetResult(); res != nil && res.GetIsFinal() && r.oneRecognition {
		r.out.finalized(r.timeline.bytesOf(res.GetEndOffset()))
	}
	return resp.GetFlowStatus() == nil || r.callerFlow
}

// delayAfter: a connection failed with err. A delay >= 0: reconnect after it; -1: the stream in
// fact ended normally; giveUp non-nil: the error to return.
func (r *resumer) delayAfter(err error) (delay time.Duration, giveUp error) {
	if failure := r.out.failed(); failure != nil {
		return 0, failure
	}
	if r.endedOK && connectionLost(err) {
		return -1, nil // the session ended cleanly; how its connection then went does not matter
	}
	if d, ok := r.retryDelay(err); ok {
		return d, nil
	}
	return 0, err
}

func (r *resumer) retryDelay(err error) (time.Duration, bool) {
	p := r.policy
	if p == nil || r.ended || !(r.token != "" || r.reopening) {
		return 0, false
	}
	reason := errorReason(err)
	var tries int
	switch {
	case r.token != "" && reason == "SESSION_NOT_FOUND":
		if r.heard && !(p.RestartLostSessions && r.oneRecognition) {
			return 0, false
		}
		// Gone: it ended before it heard anything, or its server process died with it. A new
		// session redoes the audio from the end of the last final on: every final once.
		r.startNewSession(r.out.restartAt(r.out.finalizedOffset()))
		return p.Backoff, true
	case r.token != "" && reason == "SESSION_ATTACHED":
		now := time.Now()
		if r.attachedSince.IsZero() {
			r.attachedSince = now
		}
		if now.Sub(r.attachedSince) > p.AttachedWait {
			return 0, false
		}
		r.attachedTries++
		tries = r.attachedTries
	case connectionLost(err):
		now := time.Now()
		if r.lostSince.IsZero() {
			r.lostSince = now
		}
		r.failures++
		if p.MaxAttempts > 0 && r.failures > p.MaxAttempts {
			return 0, false
		}
		window := p.ReconnectWindow
		if window == 0 {
			window = r.resumeWindow
		}
		if now.Add(backoff(p, r.failures)).Sub(r.lostSince) > window {
			return 0, false
		}
		tries = r.failures
	default:
		return 0, false
	}
	return backoff(p, tries), true
}

// backoff is the pause before attempt number tries (1, 2, ...): Backoff doubled each time, up to MaxBackoff.
func backoff(p *Policy, tries int) time.Duration {
	delay := p.Backoff << uint(tries-1)
	if delay > p.MaxBackoff || delay < 0 {
		delay = p.MaxBackoff
	}
	return delay
}

// reconnecting: after the retry delay, the next connection's first request.
func (r *resumer) reconnecting() {
	if r.token == "" {
		r.request = r.firstConfig() // a drained session's replacement was refused: again
		return
	}
	r.request = &pb.StreamingConfig{
		ResumeToken:      r.token,
		ResumeLastSeq:    r.lastSeq,
		ResumeAudioBytes: uint64(r.out.resumeOffset() - r.timeline.audioBytes),
	}
}

// nextSession: the stream ended without an error; whether to go on in a new session (a drain).
func (r *resumer) nextSession() bool {
	if !(r.drained && r.policy != nil && r.policy.ReconnectOnDrain) {
		return false
	}
	start := r.out.restartAt(r.timeline.audioBytes + r.processed)
	if r.out.finishedReading() {
		return false // the drained session had all the audio there is
	}
	r.startNewSession(start)
	return true
}

func (r *resumer) startNewSession(start int) {
	r.timeline.newSession(start)
	r.token, r.lastSeq, r.finalIDs, r.heard, r.reopening = "", 0, map[string]bool{}, false, true
	r.request = r.firstConfig()
}

// timeline makes the successive sessions of one stream read as one.
type timeline struct {
	rate          int64
	frame         int
	audioBytes    int // stream audio before the current session's
	audio         time.Duration
	seq           uint64
	utterances    uint32
	lastSeq       uint64 // highest seq passed on
	nextUtterance uint32 // one past the highest utterance_index of a final passed on
}

func (t *timeline) bytesOf(d *durationpb.Duration) int {
	if d == nil {
		return 0
	}
	return int(d.AsDuration().Nanoseconds()*t.rate/1e9) * t.frame
}

func (t *timeline) newSession(audioBytes int) {
	t.audioBytes = audioBytes
	t.audio = time.Duration(int64(audioBytes/t.frame) * 1e9 / t.rate)
	t.seq, t.utterances = t.lastSeq, t.nextUtterance
}

func (t *timeline) shift(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(d.AsDuration() + t.audio)
}

func (t *timeline) apply(resp *pb.StreamingRecognizeResponse) {
	if t.seq != 0 || t.audio != 0 || t.utterances != 0 {
		if resp.Seq != 0 {
			resp.Seq += t.seq
		}
		switch m := resp.GetResponse().(type) {
		case *pb.StreamingRecognizeResponse_Result:
			res := m.Result
			res.UtteranceIndex += t.utterances
			res.StartOffset, res.EndOffset = t.shift(res.StartOffset), t.shift(res.EndOffset)
			for _, w := range res.Words {
				w.StartOffset, w.EndOffset = t.shift(w.StartOffset), t.shift(w.EndOffset)
			}
		case *pb.StreamingRecognizeResponse_SpeechEvent:
			m.SpeechEvent.Offset = t.shift(m.SpeechEvent.Offset)
		case *pb.StreamingRecognizeResponse_FlowStatus:
			m.FlowStatus.AckedAudioBytes += uint64(t.audioBytes)
			m.FlowStatus.AckedAudioOffset = t.shift(m.FlowStatus.AckedAudioOffset)
		}
	}
	if resp.Seq > t.lastSeq {
		t.lastSeq = resp.Seq
	}
	// Finals only: a lost session's successor transcribes the utterance in progress again.
	if res := resp.GetResult(); res != nil && res.GetIsFinal() && res.GetUtteranceIndex()+1 > t.nextUtterance {
		t.nextUtterance = res.GetUtteranceIndex() + 1
	}
}
