// A voxgate.v1 streaming call that outlives its connection: the behaviour of the Python
// client's voxgate_client.resume.
//
// - A dropped connection (UNAVAILABLE before the session's `ended`) is resumed: Stream
//   reconnects with backoff for as long as the server holds the session, presents its resume
//   token, the last seq it received and the offset it resends audio from (the last acknowledged
//   one), and resends what it kept.
//   Results are de-duplicated by result id. SESSION_ATTACHED is retried too.
// - SessionEnded{DRAINING} with audio left: a new session with the same config on the same
//   target (a balancer picks another instance), from where the drained one stopped.
// - SESSION_NOT_FOUND after the session heard audio (its server process died, e.g. a crashed
//   worker of `voxgate serve --workers N`): a new session redoes the audio from the end of the
//   last final result; the acknowledged audio after that final is kept for this.
//
// The caller sees one stream: after a seam a second `started`, then seq, utterance_index and
// every audio offset continue. Memory is bounded: at most max_unacked_bytes of unacknowledged
// audio (reading the source waits beyond it) and as much again of acknowledged audio after the
// last final.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "voxgate/v1/speech.grpc.pb.h"

namespace vgx {

struct ResumePolicy {
  // How long one disconnect is retried (reset by a response); 0: as long as the server holds the
  // session, its SessionStarted.resume_window (30 s on a default server).
  double reconnect_window_s = 0;
  int max_attempts = 0;          // also a cap on reconnects in a row for one disconnect; 0: none but the window
  double backoff_s = 0.2;        // the first pause between attempts, doubled each time ...
  double max_backoff_s = 5.0;    // ... up to this
  size_t max_unacked_bytes = 4194304;  // audio kept unacknowledged; reading waits beyond it
  int flow_status_interval_ms = 200;   // how often the server acknowledges audio
  bool reconnect_on_drain = true;      // after SessionEnded{DRAINING} with audio left: a new session
  bool restart_lost_sessions = true;   // a session lost with its server process: redo from its last final
  double attached_wait_s = 60;         // how long SESSION_ATTACHED is retried
};

// The stream's audio, one piece at a time in the configured encoding: false at its end.
using Source = std::function<bool(std::string* piece)>;
using OnResponse = std::function<void(const voxgate::v1::StreamingRecognizeResponse&)>;

struct StreamOptions {
  double pace = 0;                       // speed against real time (1: real time); 0: no pacing
  const ResumePolicy* resume = nullptr;  // nullptr: one connection, whose end is the end
};

// Sends `config`, the source's audio, then half-closes; every response the caller sees goes to
// `on_response` (FlowStatus only when the config asks for it). OK when the (last) session ends
// and the server closes with OK; else the call's status.
grpc::Status Stream(voxgate::v1::Speech::StubInterface* stub, const voxgate::v1::StreamingConfig& config,
                    Source source, const StreamOptions& options, const OnResponse& on_response);

}  // namespace vgx
