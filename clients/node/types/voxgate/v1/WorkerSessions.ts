// Original file: proto/voxgate/v1/speech.proto


export interface WorkerSessions {
  'worker'?: (number);
  'sessions'?: (number);
}

export interface WorkerSessions__Output {
  'worker': (number);
  'sessions': (number);
}
