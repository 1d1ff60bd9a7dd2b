"""Build-time workaround (applied to the unpacked DeepGEMM source on the device, never committed): replace
DeepGEMM's three `std::regex` uses by plain string scans. Its JIT crashed inside std::regex's bracket
matcher (std::collate<char>::transform, a segfault at the first kernel launch) when loaded beside torch
2.11 on the device image; the scans accept the same inputs.

    python3 deepgemm_noregex.py /tmp/dg/DeepGEMM
"""

import sys
from pathlib import Path

root = Path(sys.argv[1])
p = root / "csrc/jit/include_parser.hpp"
s = p.read_text()
old_start = s.index("        const std::regex pattern(")
old_end = s.index("        return includes;")
s = (
    s[:old_start]
    + r"""        // `#include <...>` / `#include "..."` lines, scanned without std::regex
        size_t pos = 0;
        while ((pos = code.find('#', pos)) != std::string::npos) {
            size_t i = pos + 1;
            while (i < code.size() and (code[i] == ' ' or code[i] == '\t')) ++ i;
            if (code.compare(i, 7, "include") != 0) { pos = i; continue; }
            size_t j = i + 7;
            while (j < code.size() and (code[j] == ' ' or code[j] == '\t')) ++ j;
            if (j >= code.size() or (code[j] != '<' and code[j] != '"')) { pos = j; continue; }
            size_t k = j + 1;
            while (k < code.size() and code[k] != '>' and code[k] != '"' and code[k] != '\n') ++ k;
            if (k >= code.size() or code[k] == '\n' or k == j + 1) { pos = k; continue; }
            const auto include_str = code.substr(pos, k + 1 - pos);
            pos = k + 1;
            const int len = include_str.length();
            if (include_str.substr(0, 10) == "#include <" and include_str[len - 1] == '>' and include_str[10] != ' ' and include_str[len - 2] != ' ') {
                std::string filename = include_str.substr(10, len - 11);
                if (filename.substr(0, 9) == "deep_gemm")
                    includes.push_back(filename);
            } else {
                std::string error_info = fmt::format("Non-standard include: {}", include_str);
                if (file_path != "")
                    error_info += fmt::format(" ({})", file_path.string());
                DG_HOST_UNREACHABLE(error_info);
            }
        }
"""
    + s[old_end:]
)
p.write_text(s)
p = root / "csrc/jit/compiler.hpp"
s = p.read_text()
s = s.replace(
    """        std::smatch match;
        DG_HOST_ASSERT(std::regex_search(output, match, std::regex(R"(release (\\d+\\.\\d+))")));
        std::sscanf(match[1].str().c_str(), "%d.%d", &major, &minor);""",
    """        const auto at = output.find("release ");
        DG_HOST_ASSERT(at != std::string::npos);
        DG_HOST_ASSERT(std::sscanf(output.c_str() + at + 8, "%d.%d", &major, &minor) == 2);""",
)
s = s.replace(
    """DG_HOST_ASSERT(not std::regex_search(output, std::regex(R"(Local memory used)")));""",
    """DG_HOST_ASSERT(output.find("Local memory used") == std::string::npos);""",
)
assert "std::regex" not in s, "compiler.hpp still uses std::regex"
p.write_text(s)
print("deepgemm: std::regex replaced by string scans")
