// Original file: proto/voxgate/v1/speech.proto

import type { WorkerSessions as _voxgate_v1_WorkerSessions, WorkerSessions__Output as _voxgate_v1_WorkerSessions__Output } from '../../voxgate/v1/WorkerSessions';
import type { EngineSessions as _voxgate_v1_EngineSessions, EngineSessions__Output as _voxgate_v1_EngineSessions__Output } from '../../voxgate/v1/EngineSessions';
import type { Long } from '@grpc/proto-loader';

export interface CapacityCounts {
  'service_sessions'?: (number);
  'sidecar_slots'?: (number);
  'engine_sessions'?: (number);
  'mismatches'?: (number | string | Long);
  'workers'?: (_voxgate_v1_WorkerSessions)[];
  'engines'?: (_voxgate_v1_EngineSessions)[];
}

export interface CapacityCounts__Output {
  'service_sessions': (number);
  'sidecar_slots': (number);
  'engine_sessions': (number);
  'mismatches': (string);
  'workers': (_voxgate_v1_WorkerSessions__Output)[];
  'engines': (_voxgate_v1_EngineSessions__Output)[];
}
