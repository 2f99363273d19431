// Original file: proto/voxgate/v1/speech.proto


export interface Warning {
  'code'?: (string);
  'message'?: (string);
}

export interface Warning__Output {
  'code': (string);
  'message': (string);
}
