// Command transcribe streams a WAV file to a voxgate server and prints each
// final result as "[start → end] text", like `voxgate transcribe`.
//
//	transcribe WAV [-server host:port] [-no-pace] [-speed N] [-json] [-channels separate|mix] [-no-resume]
//	               [-phrase TEXT[:BOOST]]...
//	transcribe -capabilities [-server host:port]
//
// The WAV must be 16-bit PCM; stereo (or more channels) is downmixed to mono, or with
// -channels sent as its channels, interleaved: "separate" has each recognized on its
// own (finals prefixed "[chN] ", N 1-based), "mix" has the server downmix them.
// Audio goes as LINEAR16 at the file's own rate (the server resamples), in
// 100 ms messages, paced in real time unless -no-pace.
//
// -json prints the session's start, every result (interim and final) and the end as
// one JSON object per line, with the field names of `voxgate-transcribe --json` (a
// final that replaces the utterance's interim text has "revised": true; the start says
// the engine's "interim_stability": "append_only" or "revisable"). -capabilities prints
// the server's GetCapabilities (engine, interim_stability) as JSON.
//
// The call resumes by default, as `voxgate transcribe` does (package resume): a dropped
// connection is resumed, a draining server is continued in a new session, a session lost with
// its server process is redone from its last final. -no-resume: one connection.
//
// Exit status: 0 on success, 1 when the RPC fails (the status code and the
// google.rpc.ErrorInfo reason go to stderr), 2 on bad usage or an unreadable file.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"voxgate.dev/clients/go/resume"
	pb "voxgate.dev/clients/go/voxgatev1"
)

const chunkMs = 100

// wavPCM is mono signed 16-bit little-endian PCM and its sample rate, and the file's own
// channels interleaved (its data chunk, in whole frames).
type wavPCM struct {
	sampleRate  int
	channels    int
	pcm         []byte
	interleaved []byte
}

// readWav parses a RIFF/WAVE file of 16-bit integer PCM, averaging all channels to mono.
func readWav(path string) (*wavPCM, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 12 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WAVE" {
		return nil, errors.New("not a RIFF/WAVE file")
	}
	var format, channels, bits uint16
	var rate uint32
	var samples []byte
	haveFmt := false
	for pos := 12; pos+8 <= len(data); {
		id := string(data[pos : pos+4])
		size := int(binary.LittleEndian.Uint32(data[pos+4 : pos+8]))
		end := pos + 8 + size
		if end > len(data) || end < pos {
			end = len(data)
		}
		body := data[pos+8 : end]
		switch id {
		case "fmt ":
			if len(body) < 16 {
				return nil, errors.New("short fmt chunk")
			}
			format = binary.LittleEndian.Uint16(body[0:2])
			channels = binary.LittleEndian.Uint16(body[2:4])
			rate = binary.LittleEndian.Uint32(body[4:8])
			bits = binary.LittleEndian.Uint16(body[14:16])
			if format == 0xfffe && len(body) >= 26 { // WAVE_FORMAT_EXTENSIBLE: the sub-format GUID starts with the tag
				format = binary.LittleEndian.Uint16(body[24:26])
			}
			haveFmt = true
		case "data":
			samples = body
		}
		pos += 8 + size + size%2 // chunks are word-aligned
	}
	if !haveFmt || samples == nil {
		return nil, errors.New("WAV file without fmt or data chunk")
	}
	if format != 1 || bits != 16 {
		return nil, fmt.Errorf("unsupported WAV encoding (format %d, %d bits): 16-bit PCM only", format, bits)
	}
	if channels < 1 {
		return nil, errors.New("WAV file with no channels")
	}
	n := int(channels)
	frames := len(samples) / (2 * n)
	pcm := make([]byte, 2*frames)
	for i := 0; i < frames; i++ {
		sum := 0
		for c := 0; c < n; c++ {
			sum += int(int16(binary.LittleEndian.Uint16(samples[2*(i*n+c):])))
		}
		binary.LittleEndian.PutUint16(pcm[2*i:], uint16(int16(sum/n)))
	}
	return &wavPCM{sampleRate: int(rate), channels: n, pcm: pcm, interleaved: samples[:2*n*frames]}, nil
}

// streamConfig is the session's config for `wav`, and the audio to send: mono, or with
// -channels the file's own channels interleaved.
func streamConfig(wav *wavPCM, channels string) (*pb.StreamingConfig, []byte, int) {
	config := &pb.StreamingConfig{
		Encoding:          pb.AudioEncoding_AUDIO_ENCODING_LINEAR16,
		SampleRateHz:      int32(wav.sampleRate),
		AudioChannelCount: 1,
		InterimResults:    true,
	}
	audio, frame := wav.pcm, 2
	if channels != "" && wav.channels > 1 { // the file's channels as they are, interleaved
		audio, frame = wav.interleaved, 2*wav.channels
		config.AudioChannelCount = int32(wav.channels)
		config.ChannelMode = pb.ChannelMode_CHANNEL_MODE_SEPARATE
		if channels == "mix" {
			config.ChannelMode = pb.ChannelMode_CHANNEL_MODE_DOWNMIX
		}
	}
	return config, audio, frame
}

// pieces gives `audio` in chunkMs pieces of whole frames, then io.EOF.
func pieces(audio []byte, sampleRate, frame int) resume.Source {
	chunk := sampleRate * chunkMs / 1000 * frame
	if chunk < frame {
		chunk = frame
	}
	sent := 0
	return func() ([]byte, error) {
		if sent >= len(audio) {
			return nil, io.EOF
		}
		end := sent + chunk
		if end > len(audio) {
			end = len(audio)
		}
		piece := audio[sent:end]
		sent = end
		return piece, nil
	}
}

// describe renders a failed call's status like the other clients:
// "INVALID_ARGUMENT (UNSUPPORTED_AUDIO_FORMAT): message; field: description; retry in 2s".
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	head := codeName(st.Code().String())
	var extra []string
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			head += " (" + d.GetReason() + ")"
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				extra = append(extra, v.GetField()+": "+v.GetDescription())
			}
		case *errdetails.RetryInfo:
			delay := d.GetRetryDelay()
			secs := float64(delay.GetSeconds()) + float64(delay.GetNanos())/1e9
			extra = append(extra, fmt.Sprintf("retry in %gs", secs))
		}
	}
	line := head + ": " + st.Message()
	for _, e := range extra {
		line += "; " + e
	}
	return line
}

// codeName turns grpc-go's code names (InvalidArgument) into the canonical ones (INVALID_ARGUMENT).
func codeName(name string) string {
	if name == "Canceled" {
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' && !(name[i-1] >= 'A' && name[i-1] <= 'Z') {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func seconds(d interface {
	GetSeconds() int64
	GetNanos() int32
}) float64 {
	return float64(d.GetSeconds()) + float64(d.GetNanos())/1e9
}

type engineJSON struct {
	Name  string `json:"name"`
	Model string `json:"model"`
}

type startedJSON struct {
	Type             string     `json:"type"`
	SessionID        string     `json:"session_id"`
	Engine           engineJSON `json:"engine"`
	InterimStability string     `json:"interim_stability"`
	PhraseHints      string     `json:"phrase_hints,omitempty"` // what the engine does with them; absent without
}

type resultJSON struct {
	Type           string  `json:"type"`
	ResultID       string  `json:"result_id"`
	UtteranceIndex uint32  `json:"utterance_index"`
	IsFinal        bool    `json:"is_final"`
	Text           string  `json:"text"`
	Delta          string  `json:"delta"`
	StartS         float64 `json:"start_s"`
	EndS           float64 `json:"end_s"`
	Revised        bool    `json:"revised,omitempty"` // a final that replaces the utterance's interim text
	Channel        uint32  `json:"channel,omitempty"` // 1-based, with separate recognition per channel
}

type speechEventJSON struct {
	Type    string  `json:"type"`
	Event   string  `json:"event"`
	OffsetS float64 `json:"offset_s"`
	Digit   string  `json:"digit,omitempty"`
	Channel uint32  `json:"channel,omitempty"`
}

// nonSpeech names a music or DTMF speech event ("music_started", "music_ended", "dtmf"), or "" for another
// response: -non-speech asks for them.
func nonSpeech(resp *pb.StreamingRecognizeResponse) string {
	e, ok := resp.GetResponse().(*pb.StreamingRecognizeResponse_SpeechEvent)
	if !ok {
		return ""
	}
	switch t := e.SpeechEvent.GetType(); t {
	case pb.SpeechEventType_SPEECH_EVENT_TYPE_MUSIC_STARTED, pb.SpeechEventType_SPEECH_EVENT_TYPE_MUSIC_ENDED,
		pb.SpeechEventType_SPEECH_EVENT_TYPE_DTMF:
		return enumName(t.String(), "SPEECH_EVENT_TYPE_")
	}
	return ""
}

// said is how the text output says a non-speech event.
func said(event, digit string) string {
	if event == "dtmf" {
		return "DTMF " + digit
	}
	return strings.ReplaceAll(event, "_", " ")
}

type endedJSON struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type capabilitiesJSON struct {
	Engine           engineJSON `json:"engine"`
	InterimStability string     `json:"interim_stability"`
}

// enumName names an enum value as the Python client does: "INTERIM_STABILITY_REVISABLE" is "revisable",
// an unspecified one "".
func enumName(name, prefix string) string {
	if strings.HasSuffix(name, "_UNSPECIFIED") {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// stability names an InterimStability: "append_only", "revisable", "" (unspecified).
func stability(s pb.InterimStability) string {
	return enumName(s.String(), "INTERIM_STABILITY_")
}

// printJSON prints a response as `voxgate-transcribe --json` does (its started, result and ended fields).
func printJSON(resp *pb.StreamingRecognizeResponse) {
	var v interface{}
	switch r := resp.GetResponse().(type) {
	case *pb.StreamingRecognizeResponse_Started:
		s := r.Started
		v = startedJSON{"started", s.GetSessionId(), engineJSON{s.GetEngine().GetName(), s.GetEngine().GetModel()},
			stability(s.GetInterimStability()), enumName(s.GetPhraseHints().String(), "PHRASE_HINT_SUPPORT_")}
	case *pb.StreamingRecognizeResponse_Result:
		m := r.Result
		v = resultJSON{"result", m.GetResultId(), m.GetUtteranceIndex(), m.GetIsFinal(), m.GetText(), m.GetDelta(),
			seconds(m.GetStartOffset()), seconds(m.GetEndOffset()), m.GetRevised(), m.GetChannel()}
	case *pb.StreamingRecognizeResponse_SpeechEvent:
		event := nonSpeech(resp)
		if event == "" {
			return
		}
		e := r.SpeechEvent
		v = speechEventJSON{"speech_event", event, seconds(e.GetOffset()), e.GetDigit(), e.GetChannel()}
	case *pb.StreamingRecognizeResponse_Ended:
		v = endedJSON{"ended", strings.ToLower(strings.TrimPrefix(r.Ended.GetReason().String(), "SESSION_END_REASON_")),
			r.Ended.GetMessage()}
	default:
		return
	}
	line, err := json.Marshal(v)
	if err == nil {
		fmt.Println(string(line))
	}
}

// options are the command line's flags and WAV path.
type options struct {
	server       string
	pace         float64
	file         string
	json         bool
	capabilities bool
	channels     string // "", "separate" or "mix"
	noResume     bool
	phrases      phraseFlag
	nonSpeech    bool
}

// phraseFlag collects -phrase TEXT[:BOOST] (repeatable): phrase hints.
type phraseFlag []*pb.Phrase

func (f *phraseFlag) String() string { return fmt.Sprint(len(*f), " phrases") }

// Set parses 'TEXT' or 'TEXT:BOOST' (the last colon, when a number follows it).
func (f *phraseFlag) Set(spec string) error {
	phrase := &pb.Phrase{Value: spec}
	if i := strings.LastIndex(spec, ":"); i >= 0 {
		if boost, err := strconv.ParseFloat(strings.TrimSpace(spec[i+1:]), 32); err == nil {
			b := float32(boost)
			phrase = &pb.Phrase{Value: spec[:i], Boost: &b}
		}
	}
	*f = append(*f, phrase)
	return nil
}

// parseArgs accepts flags before and after the WAV path.
func parseArgs(args []string) (opts options, err error) {
	fs := flag.NewFlagSet("transcribe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&opts.server, "server", "127.0.0.1:50051", "voxgate server host:port")
	noPace := fs.Bool("no-pace", false, "send audio as fast as possible, not in real time")
	fs.Float64Var(&opts.pace, "speed", 1, "pace at this multiple of real time")
	fs.BoolVar(&opts.json, "json", false, "print the start, every result and the end as JSON lines")
	fs.BoolVar(&opts.capabilities, "capabilities", false, "print the server's capabilities as JSON and exit")
	fs.StringVar(&opts.channels, "channels", "", "send a multichannel WAV's channels: separate|mix")
	fs.BoolVar(&opts.noResume, "no-resume", false, "one connection, whose end is the end of the call")
	fs.Var(&opts.phrases, "phrase", "a phrase hint, TEXT[:BOOST] (repeatable)")
	fs.BoolVar(&opts.nonSpeech, "non-speech", false, "report music and DTMF digits the audio carries")
	var positional []string
	for {
		if err = fs.Parse(args); err != nil {
			return
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if opts.capabilities && len(positional) == 0 {
		return opts, nil
	}
	if len(positional) != 1 {
		err = errors.New("exactly one WAV file is required")
		return
	}
	if opts.pace <= 0 {
		err = errors.New("-speed must be positive")
		return
	}
	if opts.channels != "" && opts.channels != "separate" && opts.channels != "mix" {
		err = errors.New("-channels must be separate or mix")
		return
	}
	if *noPace {
		opts.pace = 0
	}
	opts.file = positional[0]
	return opts, nil
}

// printCapabilities prints GetCapabilities' engine and interim stability as one JSON object.
func printCapabilities(client pb.SpeechClient) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := client.GetCapabilities(ctx, &pb.GetCapabilitiesRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "transcribe: error: %s\n", describe(err))
		return 1
	}
	line, err := json.Marshal(capabilitiesJSON{engineJSON{caps.GetEngine().GetName(), caps.GetEngine().GetModel()},
		stability(caps.GetInterimStability())})
	if err != nil {
		fmt.Fprintf(os.Stderr, "transcribe: error: %v\n", err)
		return 1
	}
	fmt.Println(string(line))
	return 0
}

func run() int {
	opts, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "usage: transcribe WAV [-server host:port] [-no-pace] [-speed N] [-json] [-channels separate|mix] [-no-resume]\n"+
			"                  [-phrase TEXT[:BOOST]]... [-non-speech]\n"+
			"       transcribe -capabilities [-server host:port]\ntranscribe: error: %v\n", err)
		return 2
	}
	var wav *wavPCM
	if !opts.capabilities {
		if wav, err = readWav(opts.file); err != nil {
			fmt.Fprintf(os.Stderr, "transcribe: error: cannot read %s: %v\n", opts.file, err)
			return 2
		}
	}
	// grpc-go 1.33 (Debian bookworm) has WithInsecure, not insecure.NewCredentials().
	conn, err := grpc.Dial(opts.server, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintf(os.Stderr, "transcribe: error: %v\n", err)
		return 1
	}
	defer conn.Close()
	client := pb.NewSpeechClient(conn)
	if opts.capabilities {
		return printCapabilities(client)
	}

	config, audio, frame := streamConfig(wav, opts.channels)
	if len(opts.phrases) > 0 {
		config.PhraseHints = &pb.PhraseHints{Phrases: opts.phrases}
	}
	config.NonSpeechEvents = opts.nonSpeech
	streamOpts := resume.Options{Pace: opts.pace, OnResponse: func(resp *pb.StreamingRecognizeResponse) {
		printResponse(resp, opts.json)
	}}
	if !opts.noResume {
		policy := resume.DefaultPolicy()
		streamOpts.Resume = &policy
	}
	err = resume.Stream(context.Background(), client, config, pieces(audio, wav.sampleRate, frame), streamOpts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "transcribe: error: %s\n", describe(err))
		return 1
	}
	return 0
}

// printResponse prints finals as "[start → end] text" (or, with -json, what printJSON prints),
// warnings and an unusual end on stderr.
func printResponse(resp *pb.StreamingRecognizeResponse, asJSON bool) {
	if asJSON {
		if w, ok := resp.GetResponse().(*pb.StreamingRecognizeResponse_Warning); ok {
			fmt.Fprintf(os.Stderr, "warning: %s: %s\n", w.Warning.GetCode(), w.Warning.GetMessage())
		}
		printJSON(resp)
		return
	}
	switch r := resp.GetResponse().(type) {
	case *pb.StreamingRecognizeResponse_Result:
		text := strings.TrimSpace(r.Result.GetText())
		if r.Result.GetIsFinal() && text != "" {
			prefix := ""
			if ch := r.Result.GetChannel(); ch != 0 {
				prefix = fmt.Sprintf("[ch%d] ", ch)
			}
			fmt.Printf("%s[%.2fs → %.2fs] %s\n", prefix, seconds(r.Result.GetStartOffset()),
				seconds(r.Result.GetEndOffset()), text)
		}
	case *pb.StreamingRecognizeResponse_SpeechEvent:
		if event := nonSpeech(resp); event != "" {
			prefix := ""
			if ch := r.SpeechEvent.GetChannel(); ch != 0 {
				prefix = fmt.Sprintf("[ch%d] ", ch)
			}
			fmt.Printf("%s[%.2fs] (%s)\n", prefix, seconds(r.SpeechEvent.GetOffset()), said(event, r.SpeechEvent.GetDigit()))
		}
	case *pb.StreamingRecognizeResponse_Warning:
		fmt.Fprintf(os.Stderr, "warning: %s: %s\n", r.Warning.GetCode(), r.Warning.GetMessage())
	case *pb.StreamingRecognizeResponse_Ended:
		if reason := r.Ended.GetReason(); reason != pb.SessionEndReason_SESSION_END_REASON_CLIENT_END {
			name := strings.ToLower(strings.TrimPrefix(reason.String(), "SESSION_END_REASON_"))
			msg := ""
			if r.Ended.GetMessage() != "" {
				msg = ": " + r.Ended.GetMessage()
			}
			fmt.Fprintf(os.Stderr, "session ended: %s%s\n", name, msg)
		}
	}
}

func main() {
	os.Exit(run())
}
