// Original file: proto/voxgate/v1/speech.proto

import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';

export interface WordInfo {
  'word'?: (string);
  'start_offset'?: (_google_protobuf_Duration | null);
  'end_offset'?: (_google_protobuf_Duration | null);
}

export interface WordInfo__Output {
  'word': (string);
  'start_offset': (_google_protobuf_Duration__Output | null);
  'end_offset': (_google_protobuf_Duration__Output | null);
}
