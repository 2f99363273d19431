// Original file: proto/voxgate/v1/speech.proto

import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';

export interface SessionLimits {
  'max_duration'?: (_google_protobuf_Duration | null);
  'idle_timeout'?: (_google_protobuf_Duration | null);
}

export interface SessionLimits__Output {
  'max_duration': (_google_protobuf_Duration__Output | null);
  'idle_timeout': (_google_protobuf_Duration__Output | null);
}
