#include "resume.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "support.h"

namespace vgx {
namespace {

namespace pb = voxgate::v1;
using Clock = std::chrono::steady_clock;

int64_t Nanos(const google::protobuf::Duration& d) { return d.seconds() * 1000000000LL + d.nanos(); }

void SetNanos(google::protobuf::Duration* d, int64_t ns) {
  d->set_seconds(ns / 1000000000LL);
  d->set_nanos(static_cast<int32_t>(ns % 1000000000LL));
}

struct Entry {
  size_t offset;  // audio bytes of the stream before this piece
  std::string data;
  size_t end() const { return offset + data.size(); }
};

enum class Step { kSend, kClose, kStop };

// The source's audio as read: what is not yet acknowledged (resent on a resume) and the
// acknowledged audio after the last final (resent when a lost session is redone). One sender at
// a time reads it through Next(); the reader acknowledges.
class Outbox {
 public:
  Outbox(Source source, size_t max_unacked, double pace, double bytes_per_second)
      : source_(std::move(source)), max_unacked_(max_unacked), pace_(pace), bytes_per_second_(bytes_per_second) {}

  int NewEpoch() {
    std::lock_guard<std::mutex> lock(mu_);
    ++epoch_;
    cv_.notify_all();
    return epoch_;
  }

  // Connection `epoch` starts sending from the oldest unacknowledged byte.
  void Connect(int epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch == epoch_) sent_end_ = ResumeOffsetLocked();
  }

  size_t ResumeOffset() {
    std::lock_guard<std::mutex> lock(mu_);
    return ResumeOffsetLocked();
  }

  void Ack(size_t acked) {
    std::lock_guard<std::mutex> lock(mu_);
    acked_ = std::max(acked_, acked);
    Release();
    cv_.notify_all();
  }

  // Final results came for the audio before stream offset `offset`.
  void Finalized(size_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    finalized_ = std::max(finalized_, offset);
    while (!redo_.empty() && redo_.front().end() <= finalized_) DropRedoHead();
  }

  size_t FinalizedOffset() {
    std::lock_guard<std::mutex> lock(mu_);
    return finalized_;
  }

  // A new session takes over at stream offset `offset`; returns where its audio starts (later
  // when the audio from `offset` is no longer held).
  size_t RestartAt(size_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    offset = std::min(offset, offset_);
    for (auto it = redo_.rbegin(); it != redo_.rend(); ++it) {
      if (it->end() > offset) buffer_.push_front(*it);
    }
    redo_.clear();
    redo_bytes_ = 0;
    finalized_ = acked_ = offset;
    while (!buffer_.empty() && buffer_.front().end() <= offset) buffer_.pop_front();
    if (!buffer_.empty() && buffer_.front().offset < offset) {
      Entry& head = buffer_.front();
      head.data = head.data.substr(offset - head.offset);
      head.offset = offset;
    }
    return ResumeOffsetLocked();
  }

  // The source is done and nothing read from it waits to be (re)sent.
  bool Finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return exhausted_ && buffer_.empty();
  }

  // What the sender of connection `epoch` does next: the held audio from its resume offset, then
  // new audio from the source (paced), until the source ends or the connection is replaced.
  Step Next(int epoch, std::string* data) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (epoch != epoch_) return Step::kStop;
      for (const Entry& e : buffer_) {
        if (e.offset >= sent_end_) {
          sent_end_ = e.end();
          Release();  // acks that came before it was sent
          if (!started_) started_at_ = Clock::now(), started_ = true;
          *data = e.data;
          return Step::kSend;
        }
      }
      if (exhausted_) return Step::kClose;
      if (max_unacked_ > 0 && offset_ - acked_ >= max_unacked_) {
        cv_.wait(lock);  // backpressure: the server's acknowledgements catch up first
        continue;
      }
      std::string piece;
      lock.unlock();
      const bool more = source_(&piece);  // outside the lock: a live source may block
      lock.lock();
      if (!more) {
        exhausted_ = true;
        continue;
      }
      if (piece.empty()) continue;
      Entry entry{offset_, std::move(piece)};
      offset_ = entry.end();
      if (pace_ > 0 && started_) {  // new audio waits for its time; a new epoch wakes it
        const auto due = started_at_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                           entry.offset / bytes_per_second_ / pace_));
        cv_.wait_until(lock, due, [&] { return epoch != epoch_; });
      }
      if (max_unacked_ == 0) {  // no resume: nothing kept
        if (epoch != epoch_) return Step::kStop;
        if (!started_) started_at_ = Clock::now(), started_ = true;  // the pace counts from the first send
        *data = std::move(entry.data);
        return Step::kSend;
      }
      buffer_.push_back(std::move(entry));
    }
  }

 private:
  size_t ResumeOffsetLocked() const { return buffer_.empty() ? offset_ : buffer_.front().offset; }

  // Only audio this connection was handed is released: a resumed stream must resend every byte
  // from its resume offset, and acks logged before the drop may arrive first.
  void Release() {
    const size_t limit = std::min(acked_, sent_end_);
    while (!buffer_.empty() && buffer_.front().end() <= limit) {
      Entry e = std::move(buffer_.front());
      buffer_.pop_front();
      if (e.end() <= finalized_) continue;
      redo_bytes_ += e.data.size();
      redo_.push_back(std::move(e));
      while (!redo_.empty() && redo_bytes_ > max_unacked_) DropRedoHead();
    }
  }

  void DropRedoHead() {
    redo_bytes_ -= redo_.front().data.size();
    redo_.pop_front();
  }

  Source source_;
  const size_t max_unacked_;  // 0: keep nothing (no resume)
  const double pace_;
  const double bytes_per_second_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> buffer_;  // read and not acknowledged, in order
  std::deque<Entry> redo_;    // acknowledged after the last final
  size_t redo_bytes_ = 0;
  size_t offset_ = 0;  // audio bytes read from the source
  size_t acked_ = 0;
  size_t finalized_ = 0;
  size_t sent_end_ = 0;  // the current connection has been handed the audio up to here
  bool exhausted_ = false;
  int epoch_ = 0;
  bool started_ = false;
  Clock::time_point started_at_;  // when the first audio went out (pacing)
};

// Makes the successive sessions of one stream read as one.
class Timeline {
 public:
  Timeline(int64_t rate, size_t frame) : rate_(rate), frame_(frame) {}

  size_t BytesOf(const google::protobuf::Duration& d) const {
    return static_cast<size_t>(Nanos(d) * rate_ / 1000000000LL) * frame_;
  }

  size_t audio_bytes() const { return audio_bytes_; }

  void NewSession(size_t audio_bytes) {
    audio_bytes_ = audio_bytes;
    audio_ns_ = static_cast<int64_t>(audio_bytes / frame_) * 1000000000LL / rate_;
    seq_ = last_seq_;
    utterances_ = next_utterance_;
  }

  void Apply(pb::StreamingRecognizeResponse* r) {
    if (seq_ || audio_ns_ || utterances_) {
      if (r->seq()) r->set_seq(r->seq() + seq_);
      auto shift = [this](google::protobuf::Duration* d) { SetNanos(d, Nanos(*d) + audio_ns_); };
      switch (r->response_case()) {
        case pb::StreamingRecognizeResponse::kResult: {
          pb::RecognitionResult* m = r->mutable_result();
          m->set_utterance_index(m->utterance_index() + utterances_);
          shift(m->mutable_start_offset());
          shift(m->mutable_end_offset());
          for (auto& w : *m->mutable_words()) {
            shift(w.mutable_start_offset());
            shift(w.mutable_end_offset());
          }
          break;
        }
        case pb::StreamingRecognizeResponse::kSpeechEvent:
          if (r->speech_event().has_offset()) shift(r->mutable_speech_event()->mutable_offset());
          break;
        case pb::StreamingRecognizeResponse::kFlowStatus:
          r->mutable_flow_status()->set_acked_audio_bytes(r->flow_status().acked_audio_bytes() + audio_bytes_);
          shift(r->mutable_flow_status()->mutable_acked_audio_offset());
          break;
        default:
          break;
      }
    }
    last_seq_ = std::max<uint64_t>(last_seq_, r->seq());
    // Finals only: a lost session's successor transcribes the utterance in progress again.
    if (r->has_result() && r->result().is_final()) {
      next_utterance_ = std::max<uint32_t>(next_utterance_, r->result().utterance_index() + 1);
    }
  }

 private:
  int64_t rate_;
  size_t frame_;
  size_t audio_bytes_ = 0;  // stream audio before the current session's
  int64_t audio_ns_ = 0;
  uint64_t seq_ = 0;
  uint32_t utterances_ = 0;
  uint64_t last_seq_ = 0;        // highest seq passed on
  uint32_t next_utterance_ = 0;  // one past the highest utterance_index of a final passed on
};

bool ConnectionLost(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return true;
  // A CANCELLED the server never sends: a proxy resetting the stream.
  return status.error_code() == grpc::StatusCode::CANCELLED && DetailsOf(status).reason.empty();
}

size_t BytesPerSampleOf(pb::AudioEncoding encoding) {
  return encoding == pb::AUDIO_ENCODING_LINEAR16 ? 2 : 1;
}

// The decisions of a stream: what the caller sees, whether and when to reconnect, and the first
// request of each connection.
class Resumer {
 public:
  Resumer(const pb::StreamingConfig& config, const ResumePolicy* policy, Outbox* outbox)
      : config_(config),
        policy_(policy),
        outbox_(outbox),
        timeline_(config.sample_rate_hz(), BytesPerSampleOf(config.encoding()) *
                                               static_cast<size_t>(std::max(config.audio_channel_count(), 1))),
        one_recognition_(config.audio_channel_count() <= 1 || config.channel_mode() != pb::CHANNEL_MODE_SEPARATE),
        caller_flow_(config.flow_status().enabled()) {
    request_ = FirstConfig();
  }

  const pb::StreamingConfig& request() const { return request_; }

  void Connecting() {
    ended_ = drained_ = ended_ok_ = false;
    processed_ = 0;
  }

  // Takes in a response; whether the caller sees it (shifted onto the stream's timeline).
  bool Passes(pb::StreamingRecognizeResponse* r) {
    if (r->has_ended()) {
      const auto reason = r->ended().reason();
      ended_ = true;
      ended_ok_ = reason != pb::SESSION_END_REASON_ERROR && reason != pb::SESSION_END_REASON_ENGINE_LOST;
      drained_ = reason == pb::SESSION_END_REASON_DRAINING;
      processed_ = timeline_.BytesOf(r->ended().audio_duration());
    }
    if (policy_ == nullptr) return true;  // one connection, one session: nothing to skip or shift
    failures_ = attached_tries_ = 0;
    attached_ = lost_ = false;
    if (r->seq() && r->seq() <= last_seq_) return false;  // delivered before the reconnect
    last_seq_ = std::max<uint64_t>(last_seq_, r->seq());
    switch (r->response_case()) {
      case pb::StreamingRecognizeResponse::kStarted:
        if (r->started().resumed()) return false;  // the same session goes on
        if (!r->started().resume_token().empty()) token_ = r->started().resume_token();
        if (r->started().has_resume_window()) {
          const auto& w = r->started().resume_window();
          resume_window_s_ = static_cast<double>(w.seconds()) + w.nanos() / 1e9;
        }
        break;
      case pb::StreamingRecognizeResponse::kFlowStatus:
        heard_ = heard_ || r->flow_status().acked_audio_bytes() > 0;
        outbox_->Ack(timeline_.audio_bytes() + r->flow_status().acked_audio_bytes());
        break;
      case pb::StreamingRecognizeResponse::kResult:
        heard_ = true;
        if (final_ids_.count(r->result().result_id())) return false;  // its utterance is already final
        if (r->result().is_final()) final_ids_.insert(r->result().result_id());
        break;
      default:
        break;
    }
    timeline_.Apply(r);
    if (r->has_result() && r->result().is_final() && one_recognition_) {
      outbox_->Finalized(timeline_.BytesOf(r->result().end_offset()));
    }
    return !r->has_flow_status() || caller_flow_;
  }

  // A connection ended with `status`. Returns true to reconnect after *delay_s; false to stop:
  // *done says the stream in fact ended normally (else `status` is the stream's).
  bool RetryAfter(const grpc::Status& status, double* delay_s, bool* done) {
    *done = false;
    if (ended_ok_ && ConnectionLost(status)) {
      *done = true;  // the session ended cleanly; how its connection then went does not matter
      return false;
    }
    const ResumePolicy* p = policy_;
    if (p == nullptr || ended_ || (token_.empty() && !reopening_)) return false;
    const std::string reason = DetailsOf(status).reason;
    int tries;
    if (!token_.empty() && reason == "SESSION_NOT_FOUND") {
      if (heard_ && !(p->restart_lost_sessions && one_recognition_)) return false;
      // Gone: it ended before it heard anything, or its server process died with it. A new
      // session redoes the audio from the end of the last final on: every final once.
      StartNewSession(outbox_->RestartAt(outbox_->FinalizedOffset()));
      *delay_s = p->backoff_s;
      return true;
    } else if (!token_.empty() && reason == "SESSION_ATTACHED") {
      const auto now = Clock::now();
      if (!attached_) attached_since_ = now, attached_ = true;
      if (std::chrono::duration<double>(now - attached_since_).count() > p->attached_wait_s) return false;
      tries = ++attached_tries_;
    } else if (ConnectionLost(status)) {
      const auto now = Clock::now();
      if (!lost_) lost_since_ = now, lost_ = true;
      tries = ++failures_;
      if (p->max_attempts > 0 && tries > p->max_attempts) return false;
      const double window = p->reconnect_window_s > 0 ? p->reconnect_window_s : resume_window_s_;
      if (std::chrono::duration<double>(now - lost_since_).count() + Backoff(*p, tries) > window) return false;
    } else {
      return false;
    }
    *delay_s = Backoff(*p, tries);
    return true;
  }

  // The pause before attempt number `tries` (1, 2, ...): backoff_s doubled each time, up to max_backoff_s.
  static double Backoff(const ResumePolicy& p, int tries) {
    double delay = p.backoff_s;
    for (int i = 1; i < tries && delay < p.max_backoff_s; ++i) delay *= 2;
    return std::min(delay, p.max_backoff_s);
  }

  // After the retry delay: the next connection's first request.
  void Reconnecting() {
    if (token_.empty()) {
      request_ = FirstConfig();  // a drained session's replacement was refused: again
      return;
    }
    request_.Clear();
    request_.set_resume_token(token_);
    request_.set_resume_last_seq(last_seq_);
    request_.set_resume_audio_bytes(outbox_->ResumeOffset() - timeline_.audio_bytes());
  }

  // The stream ended without an error: whether to go on in a new session (after a drain).
  bool NextSession() {
    if (!(drained_ && policy_ != nullptr && policy_->reconnect_on_drain)) return false;
    const size_t start = outbox_->RestartAt(timeline_.audio_bytes() + processed_);
    if (outbox_->Finished()) return false;  // the drained session had all the audio there is
    StartNewSession(start);
    return true;
  }

 private:
  pb::StreamingConfig FirstConfig() const {
    pb::StreamingConfig c = config_;
    if (policy_ != nullptr) {
      c.mutable_flow_status()->set_enabled(true);
      c.mutable_flow_status()->set_interval_ms(policy_->flow_status_interval_ms);
    }
    return c;
  }

  void StartNewSession(size_t start) {
    timeline_.NewSession(start);
    token_.clear();
    last_seq_ = 0;
    final_ids_.clear();
    heard_ = false;
    reopening_ = true;
    request_ = FirstConfig();
  }

  const pb::StreamingConfig config_;
  const ResumePolicy* policy_;
  Outbox* outbox_;
  Timeline timeline_;
  const bool one_recognition_;  // its finals mark where a lost session is redone from
  const bool caller_flow_;      // the caller asked for FlowStatus itself
  pb::StreamingConfig request_;
  std::string token_;
  uint64_t last_seq_ = 0;  // of the current session
  std::set<std::string> final_ids_;
  int failures_ = 0;
  bool lost_ = false;              // a disconnect is being retried, since lost_since_
  Clock::time_point lost_since_;
  double resume_window_s_ = 30;    // the session's, once its SessionStarted came (a default server's before)
  int attached_tries_ = 0;
  bool attached_ = false;
  Clock::time_point attached_since_;
  bool reopening_ = false;
  bool heard_ = false;
  bool ended_ = false, drained_ = false, ended_ok_ = false;
  size_t processed_ = 0;
};

// One call: a thread sends (first request, audio, half-close) while this one reads.
grpc::Status Connection(pb::Speech::StubInterface* stub, Resumer* resumer, Outbox* outbox, int epoch,
                        const OnResponse& on_response) {
  grpc::ClientContext context;
  auto stream = stub->StreamingRecognize(&context);
  pb::StreamingRecognizeRequest first;
  *first.mutable_config() = resumer->request();
  std::thread writer([&] {
    if (!stream->Write(first)) return;  // the call is over: Finish() says why
    outbox->Connect(epoch);
    pb::StreamingRecognizeRequest request;
    std::string data;
    for (;;) {
      const Step step = outbox->Next(epoch, &data);
      if (step == Step::kClose) stream->WritesDone();
      if (step != Step::kSend) return;
      request.set_audio(data);
      if (!stream->Write(request)) return;
    }
  });
  pb::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
    if (resumer->Passes(&response)) on_response(response);
  }
  outbox->NewEpoch();  // the writer stops at its next step (a Write on an ended call fails at once)
  writer.join();
  return stream->Finish();
}

}  // namespace

grpc::Status Stream(pb::Speech::StubInterface* stub, const pb::StreamingConfig& config, Source source,
                    const StreamOptions& options, const OnResponse& on_response) {
  const size_t frame = BytesPerSampleOf(config.encoding()) * static_cast<size_t>(std::max(config.audio_channel_count(), 1));
  const ResumePolicy* policy = options.resume;
  if (policy != nullptr && (policy->max_attempts < 0 || policy->reconnect_window_s < 0 || policy->max_unacked_bytes == 0)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "resume: max_attempts >= 0, reconnect_window_s >= 0 and max_unacked_bytes > 0");
  }
  Outbox outbox(std::move(source), policy ? policy->max_unacked_bytes : 0, options.pace,
                static_cast<double>(config.sample_rate_hz()) * frame);
  Resumer resumer(config, policy, &outbox);
  for (;;) {
    const int epoch = outbox.NewEpoch();
    resumer.Connecting();
    const grpc::Status status = Connection(stub, &resumer, &outbox, epoch, on_response);
    if (!status.ok()) {
      double delay_s = 0;
      bool done = false;
      if (resumer.RetryAfter(status, &delay_s, &done)) {
        std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
        resumer.Reconnecting();
        continue;
      }
      if (!done) return status;
    }
    if (!resumer.NextSession()) return grpc::Status::OK;
  }
}

}  // namespace vgx
