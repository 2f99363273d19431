// Original file: proto/voxgate/v1/speech.proto


export interface EndpointingConfig {
  'silence_ms'?: (number);
}

export interface EndpointingConfig__Output {
  'silence_ms': (number);
}
