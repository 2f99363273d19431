// Original file: proto/voxgate/v1/speech.proto

import type { KvGroupRuntime as _voxgate_v1_KvGroupRuntime, KvGroupRuntime__Output as _voxgate_v1_KvGroupRuntime__Output } from '../../voxgate/v1/KvGroupRuntime';

export interface PositionRuntime {
  'model_runner'?: (string);
  'async_scheduling'?: (boolean);
  'kv_cache_dtype'?: (string);
  'kv_groups'?: (_voxgate_v1_KvGroupRuntime)[];
}

export interface PositionRuntime__Output {
  'model_runner': (string);
  'async_scheduling': (boolean);
  'kv_cache_dtype': (string);
  'kv_groups': (_voxgate_v1_KvGroupRuntime__Output)[];
}
