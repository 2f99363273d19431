"""Reconstruct the third-party .proto files of the compatibility APIs from installed client packages.

Neither vendor ships .proto sources on PyPI, but both client packages carry the
compiled FileDescriptorProtos. This script prints them back as .proto text into
proto/third_party/ (generated, never hand-edited), which scripts/gen_protos.py
then compiles like any other proto:

- nvidia-riva-client: riva/proto/riva_{asr,audio,common}.proto, names unchanged.
- google-cloud-speech: the v1 types (proto-plus builds them under
  google/cloud/speech_v1/types/), written as google/cloud/speech/v1/*.proto.
  Its descriptors carry no service, so the `Speech` service is added here with
  the RPCs voxgate serves (the method paths and message types are Google's).

Run: python scripts/dump_compat_protos.py  (needs the `dev` extra installed).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "proto" / "third_party"
GOOGLE_RENAMES = {
    "google/cloud/speech_v1/types/cloud_speech.proto": "google/cloud/speech/v1/cloud_speech.proto",
    "google/cloud/speech_v1/types/resource.proto": "google/cloud/speech/v1/resource.proto",
}
GOOGLE_SERVICE = """
// Added by scripts/dump_compat_protos.py: the client's runtime descriptors carry no service.
service Speech {
  rpc Recognize(RecognizeRequest) returns (RecognizeResponse);
  rpc StreamingRecognize(stream StreamingRecognizeRequest) returns (stream StreamingRecognizeResponse);
}
"""
FDP = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    FDP.TYPE_DOUBLE: "double",
    FDP.TYPE_FLOAT: "float",
    FDP.TYPE_INT64: "int64",
    FDP.TYPE_UINT64: "uint64",
    FDP.TYPE_INT32: "int32",
    FDP.TYPE_FIXED64: "fixed64",
    FDP.TYPE_FIXED32: "fixed32",
    FDP.TYPE_BOOL: "bool",
    FDP.TYPE_STRING: "string",
    FDP.TYPE_BYTES: "bytes",
    FDP.TYPE_UINT32: "uint32",
    FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64",
    FDP.TYPE_SINT32: "sint32",
    FDP.TYPE_SINT64: "sint64",
}


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


def _options(opts: object) -> list[tuple[str, str]]:
    return [
        (f.name, _value(v))
        for f, v in opts.ListFields()  # type: ignore[attr-defined]
        if f.name not in ("map_entry",) and not f.is_extension
    ]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _type(f: descriptor_pb2.FieldDescriptorProto) -> str:
    return SCALARS.get(f.type) or f.type_name


def _field(
    f: descriptor_pb2.FieldDescriptorProto, maps: dict[str, descriptor_pb2.DescriptorProto], in_oneof: bool
) -> str:
    opts = _options(f.options)
    if f.json_name and f.json_name != _camel(f.name):
        opts.append(("json_name", _value(f.json_name)))
    suffix = " [" + ", ".join(f"{k} = {v}" for k, v in opts) + "]" if opts else ""
    if f.label == FDP.LABEL_REPEATED and f.type_name in maps:
        key, val = maps[f.type_name].field
        return f"map<{_type(key)}, {_type(val)}> {f.name} = {f.number}{suffix};"
    label = "repeated " if f.label == FDP.LABEL_REPEATED else ("optional " if f.proto3_optional else "")
    return f"{'' if in_oneof else label}{_type(f)} {f.name} = {f.number}{suffix};"


def _enum(e: descriptor_pb2.EnumDescriptorProto, indent: str) -> Iterator[str]:
    yield f"{indent}enum {e.name} {{"
    for k, v in _options(e.options):
        yield f"{indent}  option {k} = {v};"
    for val in e.value:
        opts = _options(val.options)
        suffix = " [" + ", ".join(f"{k} = {v}" for k, v in opts) + "]" if opts else ""
        yield f"{indent}  {val.name} = {val.number}{suffix};"
    yield f"{indent}}}"


def _reserved(m: descriptor_pb2.DescriptorProto, indent: str) -> Iterator[str]:
    for r in m.reserved_range:
        yield f"{indent}reserved {r.start}{'' if r.end == r.start + 1 else f' to {r.end - 1}'};"
    if m.reserved_name:
        yield f"{indent}reserved {', '.join(_value(n) for n in m.reserved_name)};"


def _message(m: descriptor_pb2.DescriptorProto, scope: str, indent: str) -> Iterator[str]:
    full = f"{scope}.{m.name}"
    maps = {f"{full}.{n.name}": n for n in m.nested_type if n.options.map_entry}
    yield f"{indent}message {m.name} {{"
    for k, v in _options(m.options):
        yield f"{indent}  option {k} = {v};"
    yield from _reserved(m, indent + "  ")
    for e in m.enum_type:
        yield from _enum(e, indent + "  ")
    for n in m.nested_type:
        if not n.options.map_entry:
            yield from _message(n, full, indent + "  ")
    real_oneofs = {f.oneof_index for f in m.field if f.HasField("oneof_index") and not f.proto3_optional}
    done: set[int] = set()
    for f in m.field:
        idx = f.oneof_index if f.HasField("oneof_index") and not f.proto3_optional else None
        if idx is None:
            yield f"{indent}  {_field(f, maps, False)}"
        elif idx in real_oneofs and idx not in done:
            done.add(idx)
            yield f"{indent}  oneof {m.oneof_decl[idx].name} {{"
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == idx and not g.proto3_optional:
                    yield f"{indent}    {_field(g, maps, True)}"
            yield f"{indent}  }}"
    yield f"{indent}}}"


def _service(s: descriptor_pb2.ServiceDescriptorProto) -> Iterator[str]:
    yield f"service {s.name} {{"
    for m in s.method:
        cs, ss = "stream " if m.client_streaming else "", "stream " if m.server_streaming else ""
        yield f"  rpc {m.name}({cs}{m.input_type}) returns ({ss}{m.output_type});"
    yield "}"


def render(fd: FileDescriptor, renames: dict[str, str], extra: str = "") -> str:
    p = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(p)
    lines = [
        f"// Generated by scripts/dump_compat_protos.py from the descriptor {p.name!r}. Do not edit.",
        f'syntax = "{p.syntax or "proto2"}";',
        "",
        f"package {p.package};",
        "",
    ]
    lines += [f'import "{renames.get(d, d)}";' for d in p.dependency]
    lines += [""] if p.dependency else []
    lines += [f"option {k} = {v};" for k, v in _options(p.options)]
    for e in p.enum_type:
        lines += ["", *_enum(e, "")]
    for m in p.message_type:
        lines += ["", *_message(m, "." + p.package, "")]
    for s in p.service:
        lines += ["", *_service(s)]
    return "\n".join(lines) + "\n" + extra


def _write(name: str, text: str) -> None:
    path = OUT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"-> {path.relative_to(ROOT)}")


def main() -> int:
    from google.cloud.speech_v1.types import cloud_speech
    from riva.client.proto import riva_asr_pb2

    asr = riva_asr_pb2.DESCRIPTOR
    for fd in (asr, *asr.dependencies):
        _write(fd.name, render(fd, {}))
    speech = cloud_speech.StreamingRecognizeRequest.pb().DESCRIPTOR.file
    for fd in (speech, *speech.dependencies):
        if fd.name in GOOGLE_RENAMES:
            extra = GOOGLE_SERVICE if fd is speech else ""
            _write(GOOGLE_RENAMES[fd.name], render(fd, GOOGLE_RENAMES, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
