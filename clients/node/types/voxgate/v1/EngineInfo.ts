// Original file: proto/voxgate/v1/speech.proto


export interface EngineInfo {
  'name'?: (string);
  'model'?: (string);
}

export interface EngineInfo__Output {
  'name': (string);
  'model': (string);
}
