// `dice --version`: the text cmake/dice_version.cmake generates at every build.
#include "dice_version.h"
#include "subcommand.h"

namespace dice::app {
const char* version_text() { return DICE_VERSION_TEXT; }
}  // namespace dice::app
