// Original file: proto/voxgate/v1/speech.proto

import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';
import type { WordInfo as _voxgate_v1_WordInfo, WordInfo__Output as _voxgate_v1_WordInfo__Output } from '../../voxgate/v1/WordInfo';

export interface RecognitionResult {
  'result_id'?: (string);
  'utterance_index'?: (number);
  'is_final'?: (boolean);
  'text'?: (string);
  'delta'?: (string);
  'start_offset'?: (_google_protobuf_Duration | null);
  'end_offset'?: (_google_protobuf_Duration | null);
  'words'?: (_voxgate_v1_WordInfo)[];
  'revised'?: (boolean);
  'channel'?: (number);
}

export interface RecognitionResult__Output {
  'result_id': (string);
  'utterance_index': (number);
  'is_final': (boolean);
  'text': (string);
  'delta': (string);
  'start_offset': (_google_protobuf_Duration__Output | null);
  'end_offset': (_google_protobuf_Duration__Output | null);
  'words': (_voxgate_v1_WordInfo__Output)[];
  'revised': (boolean);
  'channel': (number);
}
