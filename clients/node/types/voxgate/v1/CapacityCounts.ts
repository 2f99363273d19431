// Original file: proto/voxgate/v1/speech.proto

import type { Long } from '@grpc/proto-loader';

export interface CapacityCounts {
  'service_sessions'?: (number);
  'sidecar_slots'?: (number);
  'engine_sessions'?: (number);
  'mismatches'?: (number | string | Long);
}

export interface CapacityCounts__Output {
  'service_sessions': (number);
  'sidecar_slots': (number);
  'engine_sessions': (number);
  'mismatches': (string);
}
