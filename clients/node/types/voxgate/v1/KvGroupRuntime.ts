// Original file: proto/voxgate/v1/speech.proto


export interface KvGroupRuntime {
  'kind'?: (string);
  'block_size'?: (number);
  'window'?: (number);
  'attention_backend'?: (string);
  'key_layout'?: (string);
  'dtype'?: (string);
}

export interface KvGroupRuntime__Output {
  'kind': (string);
  'block_size': (number);
  'window': (number);
  'attention_backend': (string);
  'key_layout': (string);
  'dtype': (string);
}
