"""Never imports torch: the probe must not either."""

import sys

print("PROBE", "_portside_probe" in sys.modules)
print("TORCH", "torch" in sys.modules)
