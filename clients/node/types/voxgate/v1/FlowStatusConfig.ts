// Original file: proto/voxgate/v1/speech.proto


export interface FlowStatusConfig {
  'enabled'?: (boolean);
  'interval_ms'?: (number);
}

export interface FlowStatusConfig__Output {
  'enabled': (boolean);
  'interval_ms': (number);
}
