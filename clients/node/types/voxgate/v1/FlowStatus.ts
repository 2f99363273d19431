// Original file: proto/voxgate/v1/speech.proto

import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';
import type { Long } from '@grpc/proto-loader';

export interface FlowStatus {
  'acked_audio_offset'?: (_google_protobuf_Duration | null);
  'acked_audio_bytes'?: (number | string | Long);
  'buffered_audio_ms'?: (number);
  'lag_ms'?: (number);
}

export interface FlowStatus__Output {
  'acked_audio_offset': (_google_protobuf_Duration__Output | null);
  'acked_audio_bytes': (string);
  'buffered_audio_ms': (number);
  'lag_ms': (number);
}
