// Original file: proto/voxgate/v1/speech.proto

import type { SessionEndReason as _voxgate_v1_SessionEndReason, SessionEndReason__Output as _voxgate_v1_SessionEndReason__Output } from '../../voxgate/v1/SessionEndReason';
import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';

export interface SessionEnded {
  'reason'?: (_voxgate_v1_SessionEndReason);
  'message'?: (string);
  'audio_duration'?: (_google_protobuf_Duration | null);
}

export interface SessionEnded__Output {
  'reason': (_voxgate_v1_SessionEndReason__Output);
  'message': (string);
  'audio_duration': (_google_protobuf_Duration__Output | null);
}
