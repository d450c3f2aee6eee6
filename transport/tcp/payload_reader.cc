#include "transport/tcp/payload_reader.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/tcp/connection.h"
#include "transport/tcp/crc32c.h"

namespace baton::transport::tcp {
namespace {

absl::string_view Described(Protection protection) {
  switch (protection) {
    case Protection::kNone:
      return "a plain";
    case Protection::kAuthenticated:
      return "an authenticated";
    case Protection::kSealed:
      return "a sealed";
  }
  return "an unknown";
}

}  // namespace

absl::Status FitsConnection(const FrameHeader& header, const RecordCipher* open) {
  const Protection connection = open == nullptr    ? Protection::kNone
                                : open->encrypts() ? Protection::kSealed
                                                   : Protection::kAuthenticated;
  if (header.protection() == connection) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(Described(header.protection()), " frame on ",
                                          Described(connection), " connection"));
}

PayloadReader::PayloadReader(BufferedReader& in, const FrameHeader& header, RecordCipher* open)
    : in_(in), header_(header), open_(open), left_(header.payload_bytes) {
  if (header_.checksum) trailer_left_ = trailer_.size();
  if (open_ != nullptr) EncodeFrameHeader(header_, associated_);
}

absl::Status PayloadReader::ReadFromSocket(ByteSpan into, absl::Time deadline,
                                           const absl::FunctionRef<bool()>* cancelled,
                                           size_t* read) {
  return cancelled == nullptr ? in_.Read(into, deadline, read)
                              : in_.Read(into, deadline, *cancelled, read);
}

absl::Status PayloadReader::Read(ByteSpan into, absl::Time deadline,
                                 const absl::FunctionRef<bool()>* cancelled, size_t* read) {
  into = into.first(std::min<uint64_t>(into.size(), left_));
  if (open_ == nullptr) {
    size_t done = 0;
    absl::Status status;
    while (status.ok() && done < into.size()) {
      // A checksummed payload a piece at a time, so that each is checked while in the cache.
      const ByteSpan piece = into.subspan(
          done, header_.checksum ? std::min(kPieceBytes, into.size() - done) : std::dynamic_extent);
      size_t got = 0;
      status = ReadFromSocket(piece, deadline, cancelled, &got);
      if (header_.checksum) crc_ = Crc32c(crc_, piece.first(got));
      done += got;
    }
    left_ -= done;
    *read += done;
    return status;
  }
  size_t done = 0;
  while (true) {
    if (tag_left_ > 0 && record_left_ == 0) {
      BATON_RETURN_IF_ERROR(ReadTagAndOpen(deadline, cancelled));
    }
    if (done == into.size()) return absl::OkStatus();
    if (tag_left_ == 0) {  // the next record
      open_->Begin(associated_);
      ++records_begun_;
      record_left_ = static_cast<size_t>(std::min<uint64_t>(kSealedRecordBytes, left_));
      tag_left_ = tag_.size();
    }
    const ByteSpan piece = into.subspan(done, std::min(record_left_, into.size() - done));
    size_t got = 0;
    const absl::Status status = ReadFromSocket(piece, deadline, cancelled, &got);
    open_->Update(piece.first(got), piece.data());  // in place
    done += got;
    record_left_ -= got;
    left_ -= got;
    *read += got;
    BATON_RETURN_IF_ERROR(status);
  }
}

absl::Status PayloadReader::ReadTagAndOpen(absl::Time deadline,
                                           const absl::FunctionRef<bool()>* cancelled) {
  size_t got = 0;
  const absl::Status status =
      ReadFromSocket(ByteSpan(tag_).last(tag_left_), deadline, cancelled, &got);
  tag_left_ -= got;
  BATON_RETURN_IF_ERROR(status);
  if (!open_->Open(tag_)) {
    intact_ = false;
    return absl::DataLossError(absl::StrCat(open_->encrypts() ? "sealed" : "authenticated",
                                            " record ", open_->records() - 1,
                                            " of the connection did not open"));
  }
  return absl::OkStatus();
}

absl::Status PayloadReader::Skip(ByteSpan scratch, absl::Time deadline) {
  while (left_ > 0) {
    size_t read = 0;
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left_, scratch.size()));
    BATON_RETURN_IF_ERROR(Read(scratch.first(chunk), deadline, nullptr, &read));
  }
  return Finish(deadline, nullptr);
}

absl::Status PayloadReader::Finish(absl::Time deadline,
                                   const absl::FunctionRef<bool()>* cancelled) {
  if (open_ != nullptr) {
    if (records_begun_ == 0) {  // an empty payload's one record: its tag alone
      open_->Begin(associated_);
      ++records_begun_;
      tag_left_ = tag_.size();
    }
    if (tag_left_ > 0) return ReadTagAndOpen(deadline, cancelled);
    return absl::OkStatus();
  }
  if (trailer_left_ == 0) return absl::OkStatus();
  size_t got = 0;
  const absl::Status status =
      ReadFromSocket(ByteSpan(trailer_).last(trailer_left_), deadline, cancelled, &got);
  trailer_left_ -= got;
  BATON_RETURN_IF_ERROR(status);
  intact_ = DecodeFrameChecksum(trailer_) == crc_;
  return absl::OkStatus();
}

}  // namespace baton::transport::tcp
