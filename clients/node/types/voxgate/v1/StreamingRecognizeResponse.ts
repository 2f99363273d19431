// Original file: proto/voxgate/v1/speech.proto

import type { SessionStarted as _voxgate_v1_SessionStarted, SessionStarted__Output as _voxgate_v1_SessionStarted__Output } from '../../voxgate/v1/SessionStarted';
import type { RecognitionResult as _voxgate_v1_RecognitionResult, RecognitionResult__Output as _voxgate_v1_RecognitionResult__Output } from '../../voxgate/v1/RecognitionResult';
import type { SpeechEvent as _voxgate_v1_SpeechEvent, SpeechEvent__Output as _voxgate_v1_SpeechEvent__Output } from '../../voxgate/v1/SpeechEvent';
import type { SessionEnded as _voxgate_v1_SessionEnded, SessionEnded__Output as _voxgate_v1_SessionEnded__Output } from '../../voxgate/v1/SessionEnded';
import type { Warning as _voxgate_v1_Warning, Warning__Output as _voxgate_v1_Warning__Output } from '../../voxgate/v1/Warning';
import type { FlowStatus as _voxgate_v1_FlowStatus, FlowStatus__Output as _voxgate_v1_FlowStatus__Output } from '../../voxgate/v1/FlowStatus';
import type { PhraseHintsUpdated as _voxgate_v1_PhraseHintsUpdated, PhraseHintsUpdated__Output as _voxgate_v1_PhraseHintsUpdated__Output } from '../../voxgate/v1/PhraseHintsUpdated';
import type { Long } from '@grpc/proto-loader';

export interface StreamingRecognizeResponse {
  'seq'?: (number | string | Long);
  'started'?: (_voxgate_v1_SessionStarted | null);
  'result'?: (_voxgate_v1_RecognitionResult | null);
  'speech_event'?: (_voxgate_v1_SpeechEvent | null);
  'ended'?: (_voxgate_v1_SessionEnded | null);
  'warning'?: (_voxgate_v1_Warning | null);
  'flow_status'?: (_voxgate_v1_FlowStatus | null);
  'phrase_hints_updated'?: (_voxgate_v1_PhraseHintsUpdated | null);
  'response'?: "started"|"result"|"speech_event"|"ended"|"warning"|"flow_status"|"phrase_hints_updated";
}

export interface StreamingRecognizeResponse__Output {
  'seq': (string);
  'started'?: (_voxgate_v1_SessionStarted__Output | null);
  'result'?: (_voxgate_v1_RecognitionResult__Output | null);
  'speech_event'?: (_voxgate_v1_SpeechEvent__Output | null);
  'ended'?: (_voxgate_v1_SessionEnded__Output | null);
  'warning'?: (_voxgate_v1_Warning__Output | null);
  'flow_status'?: (_voxgate_v1_FlowStatus__Output | null);
  'phrase_hints_updated'?: (_voxgate_v1_PhraseHintsUpdated__Output | null);
  'response'?: "started"|"result"|"speech_event"|"ended"|"warning"|"flow_status"|"phrase_hints_updated";
}
