"""Sets one key of a topology file's "communication" block in the file's text, the rest byte for
byte: the shipped files keep some sourced values on one line, which json.dumps would not. Shared by
the calibration scripts that write into topologies (fit_collectives.py, fit_p2p_network.py)."""
import json


def with_communication_key(text, key, value):
    """The text with communication.<key> set to value: replaced where it is, else added after
    copy_engine_efficiency."""
    decoder = json.JSONDecoder()
    comm = text.index('"communication"')
    quoted = json.dumps(key)
    at = text.find(quoted, comm)
    if at >= 0:  # replace the old value
        start = text.index("{", at)
        _, end = decoder.raw_decode(text, start)
        indent = text[text.rfind("\n", 0, at) + 1:at]
        return text[:start] + block(value, indent) + text[end:]
    at = text.index('"copy_engine_efficiency"', comm)
    indent = text[text.rfind("\n", 0, at) + 1:at]
    _, end = decoder.raw_decode(text, text.index("{", at))
    return text[:end] + ",\n" + indent + quoted + ": " + block(value, indent) + text[end:]


def block(value, indent):
    return json.dumps(value, indent=2).replace("\n", "\n" + indent)
