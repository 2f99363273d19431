import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from './google/protobuf/Duration';
import type { CapacityCounts as _voxgate_v1_CapacityCounts, CapacityCounts__Output as _voxgate_v1_CapacityCounts__Output } from './voxgate/v1/CapacityCounts';
import type { EndpointingConfig as _voxgate_v1_EndpointingConfig, EndpointingConfig__Output as _voxgate_v1_EndpointingConfig__Output } from './voxgate/v1/EndpointingConfig';
import type { EngineInfo as _voxgate_v1_EngineInfo, EngineInfo__Output as _voxgate_v1_EngineInfo__Output } from './voxgate/v1/EngineInfo';
import type { EngineSessions as _voxgate_v1_EngineSessions, EngineSessions__Output as _voxgate_v1_EngineSessions__Output } from './voxgate/v1/EngineSessions';
import type { Finalize as _voxgate_v1_Finalize, Finalize__Output as _voxgate_v1_Finalize__Output } from './voxgate/v1/Finalize';
import type { FlowStatus as _voxgate_v1_FlowStatus, FlowStatus__Output as _voxgate_v1_FlowStatus__Output } from './voxgate/v1/FlowStatus';
import type { FlowStatusConfig as _voxgate_v1_FlowStatusConfig, FlowStatusConfig__Output as _voxgate_v1_FlowStatusConfig__Output } from './voxgate/v1/FlowStatusConfig';
import type { GetCapabilitiesRequest as _voxgate_v1_GetCapabilitiesRequest, GetCapabilitiesRequest__Output as _voxgate_v1_GetCapabilitiesRequest__Output } from './voxgate/v1/GetCapabilitiesRequest';
import type { GetCapabilitiesResponse as _voxgate_v1_GetCapabilitiesResponse, GetCapabilitiesResponse__Output as _voxgate_v1_GetCapabilitiesResponse__Output } from './voxgate/v1/GetCapabilitiesResponse';
import type { KeepAlive as _voxgate_v1_KeepAlive, KeepAlive__Output as _voxgate_v1_KeepAlive__Output } from './voxgate/v1/KeepAlive';
import type { KvGroupRuntime as _voxgate_v1_KvGroupRuntime, KvGroupRuntime__Output as _voxgate_v1_KvGroupRuntime__Output } from './voxgate/v1/KvGroupRuntime';
import type { Phrase as _voxgate_v1_Phrase, Phrase__Output as _voxgate_v1_Phrase__Output } from './voxgate/v1/Phrase';
import type { PhraseHintCapabilities as _voxgate_v1_PhraseHintCapabilities, PhraseHintCapabilities__Output as _voxgate_v1_PhraseHintCapabilities__Output } from './voxgate/v1/PhraseHintCapabilities';
import type { PhraseHints as _voxgate_v1_PhraseHints, PhraseHints__Output as _voxgate_v1_PhraseHints__Output } from './voxgate/v1/PhraseHints';
import type { PhraseHintsUpdated as _voxgate_v1_PhraseHintsUpdated, PhraseHintsUpdated__Output as _voxgate_v1_PhraseHintsUpdated__Output } from './voxgate/v1/PhraseHintsUpdated';
import type { PositionRuntime as _voxgate_v1_PositionRuntime, PositionRuntime__Output as _voxgate_v1_PositionRuntime__Output } from './voxgate/v1/PositionRuntime';
import type { RecognitionResult as _voxgate_v1_RecognitionResult, RecognitionResult__Output as _voxgate_v1_RecognitionResult__Output } from './voxgate/v1/RecognitionResult';
import type { SessionEnded as _voxgate_v1_SessionEnded, SessionEnded__Output as _voxgate_v1_SessionEnded__Output } from './voxgate/v1/SessionEnded';
import type { SessionLimits as _voxgate_v1_SessionLimits, SessionLimits__Output as _voxgate_v1_SessionLimits__Output } from './voxgate/v1/SessionLimits';
import type { SessionStarted as _voxgate_v1_SessionStarted, SessionStarted__Output as _voxgate_v1_SessionStarted__Output } from './voxgate/v1/SessionStarted';
import type { SpeechClient as _voxgate_v1_SpeechClient, SpeechDefinition as _voxgate_v1_SpeechDefinition } from './voxgate/v1/Speech';
import type { SpeechEvent as _voxgate_v1_SpeechEvent, SpeechEvent__Output as _voxgate_v1_SpeechEvent__Output } from './voxgate/v1/SpeechEvent';
import type { StreamingConfig as _voxgate_v1_StreamingConfig, StreamingConfig__Output as _voxgate_v1_StreamingConfig__Output } from './voxgate/v1/StreamingConfig';
import type { StreamingRecognizeRequest as _voxgate_v1_StreamingRecognizeRequest, StreamingRecognizeRequest__Output as _voxgate_v1_StreamingRecognizeRequest__Output } from './voxgate/v1/StreamingRecognizeRequest';
import type { StreamingRecognizeResponse as _voxgate_v1_StreamingRecognizeResponse, StreamingRecognizeResponse__Output as _voxgate_v1_StreamingRecognizeResponse__Output } from './voxgate/v1/StreamingRecognizeResponse';
import type { Warning as _voxgate_v1_Warning, Warning__Output as _voxgate_v1_Warning__Output } from './voxgate/v1/Warning';
import type { WordInfo as _voxgate_v1_WordInfo, WordInfo__Output as _voxgate_v1_WordInfo__Output } from './voxgate/v1/WordInfo';
import type { WorkerSessions as _voxgate_v1_WorkerSessions, WorkerSessions__Output as _voxgate_v1_WorkerSessions__Output } from './voxgate/v1/WorkerSessions';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  google: {
    protobuf: {
      Duration: MessageTypeDefinition<_google_protobuf_Duration, _google_protobuf_Duration__Output>
    }
  }
  voxgate: {
    v1: {
      AudioEncoding: EnumTypeDefinition
      CapacityCounts: MessageTypeDefinition<_voxgate_v1_CapacityCounts, _voxgate_v1_CapacityCounts__Output>
      ChannelMode: EnumTypeDefinition
      EndpointingConfig: MessageTypeDefinition<_voxgate_v1_EndpointingConfig, _voxgate_v1_EndpointingConfig__Output>
      EngineInfo: MessageTypeDefinition<_voxgate_v1_EngineInfo, _voxgate_v1_EngineInfo__Output>
      EngineSessions: MessageTypeDefinition<_voxgate_v1_EngineSessions, _voxgate_v1_EngineSessions__Output>
      ErrorReason: EnumTypeDefinition
      Finalize: MessageTypeDefinition<_voxgate_v1_Finalize, _voxgate_v1_Finalize__Output>
      FlowStatus: MessageTypeDefinition<_voxgate_v1_FlowStatus, _voxgate_v1_FlowStatus__Output>
      FlowStatusConfig: MessageTypeDefinition<_voxgate_v1_FlowStatusConfig, _voxgate_v1_FlowStatusConfig__Output>
      GetCapabilitiesRequest: MessageTypeDefinition<_voxgate_v1_GetCapabilitiesRequest, _voxgate_v1_GetCapabilitiesRequest__Output>
      GetCapabilitiesResponse: MessageTypeDefinition<_voxgate_v1_GetCapabilitiesResponse, _voxgate_v1_GetCapabilitiesResponse__Output>
      InterimStability: EnumTypeDefinition
      KeepAlive: MessageTypeDefinition<_voxgate_v1_KeepAlive, _voxgate_v1_KeepAlive__Output>
      KvGroupRuntime: MessageTypeDefinition<_voxgate_v1_KvGroupRuntime, _voxgate_v1_KvGroupRuntime__Output>
      Phrase: MessageTypeDefinition<_voxgate_v1_Phrase, _voxgate_v1_Phrase__Output>
      PhraseHintCapabilities: MessageTypeDefinition<_voxgate_v1_PhraseHintCapabilities, _voxgate_v1_PhraseHintCapabilities__Output>
      PhraseHintSupport: EnumTypeDefinition
      PhraseHints: MessageTypeDefinition<_voxgate_v1_PhraseHints, _voxgate_v1_PhraseHints__Output>
      PhraseHintsUpdated: MessageTypeDefinition<_voxgate_v1_PhraseHintsUpdated, _voxgate_v1_PhraseHintsUpdated__Output>
      PositionMode: EnumTypeDefinition
      PositionRuntime: MessageTypeDefinition<_voxgate_v1_PositionRuntime, _voxgate_v1_PositionRuntime__Output>
      RecognitionResult: MessageTypeDefinition<_voxgate_v1_RecognitionResult, _voxgate_v1_RecognitionResult__Output>
      SessionEndReason: EnumTypeDefinition
      SessionEnded: MessageTypeDefinition<_voxgate_v1_SessionEnded, _voxgate_v1_SessionEnded__Output>
      SessionLimits: MessageTypeDefinition<_voxgate_v1_SessionLimits, _voxgate_v1_SessionLimits__Output>
      SessionStarted: MessageTypeDefinition<_voxgate_v1_SessionStarted, _voxgate_v1_SessionStarted__Output>
      Speech: SubtypeConstructor<typeof grpc.Client, _voxgate_v1_SpeechClient> & { service: _voxgate_v1_SpeechDefinition }
      SpeechEvent: MessageTypeDefinition<_voxgate_v1_SpeechEvent, _voxgate_v1_SpeechEvent__Output>
      SpeechEventType: EnumTypeDefinition
      StreamingConfig: MessageTypeDefinition<_voxgate_v1_StreamingConfig, _voxgate_v1_StreamingConfig__Output>
      StreamingRecognizeRequest: MessageTypeDefinition<_voxgate_v1_StreamingRecognizeRequest, _voxgate_v1_StreamingRecognizeRequest__Output>
      StreamingRecognizeResponse: MessageTypeDefinition<_voxgate_v1_StreamingRecognizeResponse, _voxgate_v1_StreamingRecognizeResponse__Output>
      Warning: MessageTypeDefinition<_voxgate_v1_Warning, _voxgate_v1_Warning__Output>
      WordInfo: MessageTypeDefinition<_voxgate_v1_WordInfo, _voxgate_v1_WordInfo__Output>
      WorkerSessions: MessageTypeDefinition<_voxgate_v1_WorkerSessions, _voxgate_v1_WorkerSessions__Output>
    }
  }
}

