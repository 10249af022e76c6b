//go:build !linux

/**
# SPDX-FileCopyrightText: Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
**/

package dl

import (
	"fmt"
)

// Path is NOT supported on non-Linux platforms.
// For example, on freebsd (darwin) systems, dladdr should be used instead of
// dlinfo which is used on linux.
// See for example: https://github.com/Manu343726/siplasplas/issues/82
// For now we return an error.
func (dl *DynamicLibrary) Path() (string, error) {
	return "", fmt.Errorf("not implemented")
}
