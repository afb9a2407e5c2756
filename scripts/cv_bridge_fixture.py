#!/usr/bin/env python3
"""What cv_bridge does with each image encoding, read from its sources, written as a test fixture.

cv_bridge has no PyPI wheel, so CI cannot import it; test/ros/test_ros_cv_bridge.py holds our
image conversion against this record of cv_bridge's tables instead (and against cv_bridge
itself where it imports). Recorded from ros-perception/vision_opencv (``cv_bridge.cpp``:
``getCvType``, ``getEncoding``, ``getConversionCodes``, ``matFromImage``'s checks) and
ros2/common_interfaces (``sensor_msgs/image_encodings.hpp``: the encoding strings).

    python scripts/cv_bridge_fixture.py VISION_OPENCV_GIT COMMON_INTERFACES_GIT --ref humble \
        > test/fixtures/cv_bridge/humble.json
    python scripts/cv_bridge_fixture.py VISION_OPENCV_GIT COMMON_INTERFACES_GIT --ref jazzy \
        --vision-opencv-ref rolling > test/fixtures/cv_bridge/jazzy.json

vision_opencv has no jazzy branch: Jazzy's cv_bridge (4.x) is released from rolling.

Besides the tables, it records the steps ``toCvCopy(msg, "rgb8")`` and ``(msg, "bgr8")`` take
for each encoding (``getConversionCode``: the colour code, then a depth change where the bit
depths and families differ), the 16-to-8-bit scale of that depth change, the encodings
image_encodings calls colour, and the guesses ``cvtColorForDisplay`` makes for OpenCV type names.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

CV_BRIDGE_CPP = "cv_bridge/src/cv_bridge.cpp"
ENCODINGS_HPP = "sensor_msgs/include/sensor_msgs/image_encodings.hpp"
#: ``const char RGB8[] = "rgb8";``
ENCODING_CONST = re.compile(r'const char (\w+)\[\] = "([^"]+)";')
#: ``if (encoding == enc::BGR8) {return CV_8UC3;}``
CV_TYPE = re.compile(r"if \(encoding == enc::(\w+)\) \{return CV_(\d+[USF])C(\d)")
#: ``if ((encoding == enc::MONO8) || (encoding == enc::MONO16)) {return GRAY;}``
FAMILY = re.compile(
    r"if \(\(?encoding == enc::(\w+)\)?(?: \|\| \(encoding == enc::(\w+)\))?\)? "
    r"\{return (\w+);\}"
)
#: ``res[std::make_pair(GRAY, RGB)].push_back(cv::COLOR_GRAY2RGB);``
CONVERSION = re.compile(r"res\[std::make_pair\((\w+), (\w+)\)\]\.push_back\(cv::(\w+)\);")
#: ``(src_depth == 16 && dst_depth == 8) {`` then ``image1.convertTo(..., 255. / 65535.);``
SCALE_16_TO_8 = re.compile(
    r"src_depth == 16 && dst_depth == 8\) \{\s*image1\.convertTo\("
    r"image2, image2_type, ([0-9. /]+)\);"
)
#: ``if (source->encoding == "CV_8UC3") {`` then ``source_typed->encoding = enc::BGR8;``
DISPLAY_GUESS = re.compile(
    r'source->encoding == "(\w+)"\) \{\s*'
    r"source_typed->encoding = enc::(\w+);"
)
#: the body of image_encodings' ``isColor``
IS_COLOR = re.compile(
    r"static inline bool isColor\(const std::string & encoding\)\s*\{(.*?)\}", re.S
)
DEPTH_BYTES = {"8U": 1, "8S": 1, "16U": 2, "16S": 2, "32S": 4, "32F": 4, "64F": 8}
DEPTH_DTYPE = {
    "8U": "uint8",
    "8S": "int8",
    "16U": "uint16",
    "16S": "int16",
    "32S": "int32",
    "32F": "float32",
    "64F": "float64",
}


def git_show(repo: str, ref: str, path: str) -> tuple[str, str]:
    """(text of ``path`` at ``ref``, the commit ``ref`` names) in the git directory ``repo``."""
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
    ).stdout
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    return text, commit


def steps(
    encoding: str, target: str, families: dict, cv_types: dict, conversions: dict
) -> list[str]:
    """getConversionCode(encoding, target) for a colour target: the family pair's colour code,
    then "SAME_FORMAT" (a depth change) where the bit depths and the families differ; a pair of
    one family is "SAME_FORMAT" alone."""
    source, dest = families[encoding], families[target]
    if source == dest:
        return ["SAME_FORMAT"]
    found = [conversions[f"{source}->{dest}"]]
    if cv_types[encoding]["depth"] != cv_types[target]["depth"]:
        found.append("SAME_FORMAT")
    return found


def fixture(vision_opencv: str, common_interfaces: str, ref: str, cv_ref: str) -> dict:
    """The fixture object: encoding strings, OpenCV types, families and conversions to rgb8."""
    cpp, cpp_commit = git_show(vision_opencv, cv_ref, CV_BRIDGE_CPP)
    hpp, hpp_commit = git_show(common_interfaces, ref, ENCODINGS_HPP)
    names = dict(ENCODING_CONST.findall(hpp))
    cv_types = {}
    for const, depth, channels in CV_TYPE.findall(cpp):
        cv_types[names[const]] = {
            "depth": depth,
            "dtype": DEPTH_DTYPE[depth],
            "byte_depth": DEPTH_BYTES[depth],
            "channels": int(channels),
        }
    families = {}
    for first, second, family in FAMILY.findall(cpp):
        for const in filter(None, (first, second)):
            if const in names and not family.startswith("CV_"):  # getCvType's lines match too
                families[names[const]] = family
    conversions = {f"{src}->{dst}": code for src, dst, code in CONVERSION.findall(cpp)}
    to_rgb8 = {}
    for encoding, family in sorted(families.items()):
        if family == "RGB":
            to_rgb8[encoding] = None  # SAME_FORMAT
        elif f"{family}->RGB" in conversions:
            to_rgb8[encoding] = conversions[f"{family}->RGB"]
    (scale,) = SCALE_16_TO_8.findall(cpp)
    is_color = [names[c] for c in re.findall(r"\b([A-Z0-9_]+)\b", IS_COLOR.search(hpp).group(1))]
    return {
        "source": {
            "vision_opencv": {"ref": cv_ref, "commit": cpp_commit, "file": CV_BRIDGE_CPP},
            "common_interfaces": {"ref": ref, "commit": hpp_commit, "file": ENCODINGS_HPP},
        },
        "encodings": sorted(names.values()),
        "is_color": sorted(is_color),
        "cv_types": dict(sorted(cv_types.items())),
        "families": dict(sorted(families.items())),
        "to_rgb8": to_rgb8,
        "steps": {
            target: {
                encoding: steps(encoding, target, families, cv_types, conversions)
                for encoding in sorted(families)
            }
            for target in ("rgb8", "bgr8")
        },
        "scale_16_to_8": scale,
        "display_guesses": {cv: names[const] for cv, const in DISPLAY_GUESS.findall(cpp)},
        "image_checks": {
            "min_step": "width * byte_depth * channels",
            "data_size": "height * step",
            "byte_swap": "byte_depth > 1 and is_bigendian differs from the host",
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Write the fixture JSON to stdout."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("vision_opencv", help="git directory of ros-perception/vision_opencv")
    parser.add_argument("common_interfaces", help="git directory of ros2/common_interfaces")
    parser.add_argument("--ref", default="humble", help="branch or tag to read in both")
    parser.add_argument("--vision-opencv-ref", help="branch of vision_opencv, when not --ref")
    args = parser.parse_args(argv)
    cv_ref = args.vision_opencv_ref or args.ref
    json.dump(
        fixture(args.vision_opencv, args.common_interfaces, args.ref, cv_ref), sys.stdout, indent=1
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
