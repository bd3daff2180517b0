#include "base/file_util.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(FileUtilTest, WriteThenReadRoundTrips) {
  const std::string path = TempPath("round_trip.bin");
  const std::string data("bytes\0with a zero", 17);
  ASSERT_THAT(WriteFileAtomically(path, data), IsOk());
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(data));
  // Overwriting replaces the whole file and leaves no temporary behind.
  ASSERT_THAT(WriteFileAtomically(path, "new"), IsOk());
  EXPECT_THAT(ReadFile(path), IsOkAndHolds("new"));
  EXPECT_FALSE(std::ifstream(path + ".tmp." + std::to_string(::getpid())).good());
}

TEST(FileUtilTest, WritesPartsOneAfterAnother) {
  const std::string path = TempPath("parts.bin");
  ASSERT_THAT(WriteFileAtomicallyFromParts(path, {"head", "", std::string("\0tail", 5)}), IsOk());
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(std::string("head\0tail", 9)));
}

TEST(FileUtilTest, MissingFileNamesFileAndReason) {
  EXPECT_THAT(ReadFile("/nonexistent/x.pt"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/x.pt: cannot open: No such file")));
}

TEST(FileUtilTest, FailedWriteKeepsOldFile) {
  const std::string path = TempPath("kept.bin");
  ASSERT_THAT(WriteFileAtomically(path, "old"), IsOk());
  // A folder in the way of the temporary file makes the write fail before the rename.
  // A missing folder is named with the file asked for, not the temporary file beside it.
  EXPECT_THAT(WriteFileAtomically("/nonexistent-dir/kept.bin", "x"),
              StatusIs(absl::StatusCode::kNotFound,
                       "/nonexistent-dir/kept.bin: cannot write it: its folder /nonexistent-dir "
                       "does not exist"));
  EXPECT_THAT(ReadFile(path), IsOkAndHolds("old"));
}

// Renaming over a FIFO or a device node would replace it with a regular file (as root,
// /dev/null itself): only regular files are replaced, and the node stays what it was.
TEST(FileUtilTest, OnlyRegularFilesAreReplaced) {
  const std::string fifo = TempPath("out_fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(WriteFileAtomically(fifo, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       fifo + ": is a FIFO (named pipe); libkd writes only regular files "
                              "(replacing them whole): give the path of a file"));
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // A device node of the test's own (never /dev/null itself: a wrong write would replace the
  // machine's), where the test may make one.
  const std::string device = TempPath("out_null");
  ::unlink(device.c_str());
  if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    EXPECT_THAT(WriteFileAtomically(device, "x"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(": is a character device; libkd writes only")));
    ASSERT_EQ(::stat(device.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
  EXPECT_THAT(WriteFileAtomically(TempPath(""), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a folder")));
}

// A symbolic link is neither written through nor replaced (a link to /dev/stdout, as root,
// would have put a file in place of the machine's /dev/stdout), and nothing is written into
// /dev, /proc or /sys, whatever a link's target is.
TEST(FileUtilTest, LinksAndSystemFoldersAreNotWritten) {
  const std::string target = TempPath("link_target.txt");
  ASSERT_THAT(WriteFileAtomically(target, "kept"), IsOk());
  const std::string link = TempPath("out_link");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_THAT(WriteFileAtomically(link, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       link + ": is a symbolic link; libkd neither writes through a link nor "
                              "replaces it: give the path of a file"));
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_THAT(ReadFile(target), IsOkAndHolds("kept"));
  // A link planted where the temporary file goes (its name is predictable: <file>.tmp.<pid>)
  // is removed, not written through.
  const std::string out = TempPath("out_planted.bin");
  const std::string planted = out + ".tmp." + std::to_string(::getpid());
  ::unlink(planted.c_str());
  ASSERT_EQ(::symlink(target.c_str(), planted.c_str()), 0);
  EXPECT_THAT(WriteFileAtomically(out, "new"), IsOk());
  EXPECT_THAT(ReadFile(out), IsOkAndHolds("new"));
  EXPECT_THAT(ReadFile(target), IsOkAndHolds("kept"));
  EXPECT_THAT(CheckWritablePath("/dev/libkd_out.pt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "/dev/libkd_out.pt: is in /dev, which holds the system's devices and "
                       "state, not files; give the path of a file elsewhere"));
  EXPECT_THAT(CheckWritablePath("/proc/self/libkd_out.pt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(": is in /proc, ")));
  // A path through /proc that leads elsewhere (/proc/self/cwd is the working directory).
  EXPECT_THAT(CheckWritablePath("/proc/self/cwd/libkd_out.pt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(": is in /proc, ")));
  // A link to a folder in /dev: the folder's real place counts.
  const std::string dev_link = TempPath("dev_link");
  ::unlink(dev_link.c_str());
  ASSERT_EQ(::symlink("/dev/shm", dev_link.c_str()), 0);
  EXPECT_THAT(CheckWritablePath(dev_link + "/out.pt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(": is in /dev, ")));
}

TEST(FileUtilTest, WithinAFolderByRealPlaces) {
  const std::string dir = TempPath("within");
  ::mkdir(dir.c_str(), 0755);
  EXPECT_TRUE(IsWithinFolder(dir, dir));
  EXPECT_TRUE(IsWithinFolder(dir + "/a/b.pt", dir));
  EXPECT_TRUE(IsWithinFolder(dir + "/../within/x", dir));
  EXPECT_FALSE(IsWithinFolder(dir + "/../x", dir));
  EXPECT_FALSE(IsWithinFolder(dir + "2/x", dir));  // a sibling sharing the name's start
  const std::string link = TempPath("within_link");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  EXPECT_TRUE(IsWithinFolder(link + "/x", dir));
}

TEST(FileUtilTest, OnlyRegularFilesAreRead) {
  // /dev/zero would be read until bad_alloc; a FIFO would block open() until a writer came.
  EXPECT_THAT(ReadFile("/dev/zero"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "/dev/zero: is a character device; libkd reads only regular files: give "
                       "the path of the file itself"));
  const std::string fifo = TempPath("fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ReadFile(fifo), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr(": is a FIFO (named pipe); libkd reads only")));
  EXPECT_THAT(ReadFile(TempPath("")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a folder")));
}

TEST(FileUtilTest, SizeIsCapped) {
  const std::string path = TempPath("big.bin");
  ASSERT_THAT(WriteFileAtomically(path, std::string(3000, 'x')), IsOk());
  EXPECT_THAT(ReadFile(path, 2048),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ": is 3000 bytes, more than the 2048 bytes this file may hold; "
                              "check the path"));
  EXPECT_THAT(ReadFile(path, 3000), IsOkAndHolds(std::string(3000, 'x')));
  EXPECT_EQ(HumanBytes(int64_t{16} << 30), "16.0 GiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 19), "1.5 MiB");
}

TEST(FileUtilTest, ResolveUserPath) {
  ::setenv("BUILD_WORKING_DIRECTORY", "/home/me", 1);
  EXPECT_EQ(ResolveUserPath("m.pt"), "/home/me/m.pt");
  EXPECT_EQ(ResolveUserPath("/abs/m.pt"), "/abs/m.pt");
  ::unsetenv("BUILD_WORKING_DIRECTORY");
  EXPECT_EQ(ResolveUserPath("m.pt"), "m.pt");
}

}  // namespace
}  // namespace kd
