// Original file: proto/voxgate/v1/speech.proto


export interface EngineSessions {
  'engine'?: (number);
  'ready'?: (boolean);
  'sidecar_slots'?: (number);
  'engine_sessions'?: (number);
  'max_sessions'?: (number);
}

export interface EngineSessions__Output {
  'engine': (number);
  'ready': (boolean);
  'sidecar_slots': (number);
  'engine_sessions': (number);
  'max_sessions': (number);
}
