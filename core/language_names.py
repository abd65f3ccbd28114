"""The languages a translator's codes name, for an unknown code's close matches.

One row per language: its ISO 639-3 code, its ISO 639-1 code (an individual language's
macrolanguage where it has none: arb Standard Arabic -> ar), its ISO 639-2/B code, and its
English names (`;` between them). The rows are ISO 639-3's (pycountry 26.2.16's data) of every
language with a 639-1 code and of every code NLLB-200, M2M100 and mBART-50 use, with the own
names of a few widely spoken ones (Deutsch, Español, ...). NLLB writes `deu_Latn`, M2M100 `de`,
mBART `de_DE`: core/languages.py reads each code's language from the letters before `_` / `-`,
so that any spelling of a language, or its English name, finds the model's own code.
core/contract.py hands the table to the JavaScript runtime.
"""

from __future__ import annotations

# ISO 639-3, ISO 639-1 ("-": none), ISO 639-2/B ("-": the 639-3 code), names
TABLE = """\
aar aa - Afar
abk ab - Abkhazian
ace - - Achinese
acm ar - Mesopotamian Arabic
acq ar - Ta'izzi-Adeni Arabic
aeb ar - Tunisian Arabic
afr af - Afrikaans
aka ak - Akan
als sq - Tosk Albanian
amh am - Amharic
ajp ar - South Levantine Arabic
apc ar - Levantine Arabic
ara ar - Arabic
arb ar - Standard Arabic
arg an - Aragonese
ars ar - Najdi Arabic
ary ar - Moroccan Arabic
arz ar - Egyptian Arabic
asm as - Assamese
ast - - Asturian
ava av - Avaric
ave ae - Avestan
awa - - Awadhi
aym ay - Aymara
ayr ay - Central Aymara
azb az - South Azerbaijani
aze az - Azerbaijani
azj az - North Azerbaijani
bak ba - Bashkir
bam bm - Bambara
ban - - Balinese
bel be - Belarusian
bem - - Bemba
ben bn - Bengali
bho - - Bhojpuri
bis bi - Bislama
bjn - - Banjar
bod bo tib Tibetan
bos bs - Bosnian
bre br - Breton
bug - - Buginese
bul bg - Bulgarian
cat ca - Catalan
ceb - - Cebuano
ces cs cze Czech
cha ch - Chamorro
che ce - Chechen
chu cu - Church Slavic
chv cv - Chuvash
cjk - - Chokwe
ckb ku - Central Kurdish
cor kw - Cornish
cos co - Corsican
cre cr - Cree
crh - - Crimean Tatar
cym cy wel Welsh
dan da - Danish;Dansk
deu de ger German;Deutsch
dik - - Southwestern Dinka
div dv - Divehi
dyu - - Dyula
dzo dz - Dzongkha
ell el gre Modern Greek
eng en - English
epo eo - Esperanto
est et - Estonian
eus eu baq Basque
ewe ee - Ewe
fao fo - Faroese
fas fa per Persian
fij fj - Fijian
fin fi - Finnish
fon - - Fon
fra fr fre French;Français;Francais
fry fy - Western Frisian
ful ff - Fulah
fur - - Friulian
fuv ff - Nigerian Fulfulde
gaz om - West Central Oromo
gla gd - Scottish Gaelic
gle ga - Irish
glg gl - Galician
glv gv - Manx
grn gn - Guarani
guj gu - Gujarati
hat ht - Haitian
hau ha - Hausa
hbs sh - Serbo-Croatian
heb he - Hebrew
her hz - Herero
hin hi - Hindi
hmo ho - Hiri Motu
hne - - Chhattisgarhi
hrv hr - Croatian
hun hu - Hungarian
hye hy arm Armenian
ibo ig - Igbo
ido io - Ido
iii ii - Sichuan Yi
iku iu - Inuktitut
ile ie - Interlingue
ilo - - Iloko
ina ia - Interlingua
ind id - Indonesian
ipk ik - Inupiaq
isl is ice Icelandic
ita it - Italian;Italiano
jav jv - Javanese
jpn ja - Japanese;Nihongo
kab - - Kabyle
kac - - Kachin
kal kl - Kalaallisut
kam - - Kamba
kan kn - Kannada
kas ks - Kashmiri
kat ka geo Georgian
kau kr - Kanuri
kaz kk - Kazakh
kbp - - Kabiyè
kea - - Kabuverdianu
khk mn - Halh Mongolian
khm km - Khmer
kik ki - Kikuyu
kin rw - Kinyarwanda
kir ky - Kirghiz
kmb - - Kimbundu
kmr ku - Northern Kurdish
knc kr - Central Kanuri
kom kv - Komi
kon kg - Kongo
kor ko - Korean
kua kj - Kuanyama
kur ku - Kurdish
lao lo - Lao
lat la - Latin
lav lv - Latvian
lij - - Ligurian
lim li - Limburgan
lin ln - Lingala
lit lt - Lithuanian
lmo - - Lombard
ltg - - Latgalian
ltz lb - Luxembourgish
lua - - Luba-Lulua
lub lu - Luba-Katanga
lug lg - Ganda
luo - - Luo
lus - - Lushai
lvs lv - Standard Latvian
mag - - Magahi
mah mh - Marshallese
mai - - Maithili
mal ml - Malayalam
mar mr - Marathi
min - - Minangkabau
mkd mk mac Macedonian
mlg mg - Malagasy
mlt mt - Maltese
mni - - Manipuri
mon mn - Mongolian
mos - - Mossi
mri mi mao Maori
msa ms may Malay
mya my bur Burmese
nau na - Nauru
nav nv - Navajo
nbl nr - South Ndebele
nde nd - North Ndebele
ndo ng - Ndonga
nep ne - Nepali
nld nl dut Dutch;Nederlands
nno nn - Norwegian Nynorsk
nob nb - Norwegian Bokmål;Norsk
nor no - Norwegian
npi ne - Nepali
nso - - Pedi
nus - - Nuer
nya ny - Chichewa
oci oc - Occitan
oji oj - Ojibwa
ori or - Oriya
orm om - Oromo
ory or - Odia
oss os - Ossetian
pag - - Pangasinan
pan pa - Panjabi
pap - - Papiamento
pbt ps - Southern Pashto
pes fa - Iranian Persian
pli pi - Pali
plt mg - Plateau Malagasy
pol pl - Polish;Polski
por pt - Portuguese;Português;Portugues
prs fa - Dari
pus ps - Pushto
que qu - Quechua
quy qu - Ayacucho Quechua
roh rm - Romansh
ron ro rum Romanian
run rn - Rundi
rus ru - Russian
sag sg - Sango
san sa - Sanskrit
sat - - Santali
scn - - Sicilian
shn - - Shan
sin si - Sinhala
slk sk slo Slovak
slv sl - Slovenian
sme se - Northern Sami
smo sm - Samoan
sna sn - Shona
snd sd - Sindhi
som so - Somali
sot st - Southern Sotho
spa es - Spanish;Español;Espanol;Castellano
sqi sq alb Albanian
srd sc - Sardinian
srp sr - Serbian
ssw ss - Swati
sun su - Sundanese
swa sw - Swahili
swe sv - Swedish;Svenska
swh sw - Swahili
szl - - Silesian
tah ty - Tahitian
tam ta - Tamil
taq - - Tamasheq
tat tt - Tatar
tel te - Telugu
tgk tg - Tajik
tgl tl - Tagalog
tha th - Thai
tir ti - Tigrinya
ton to - Tonga
tpi - - Tok Pisin
tsn tn - Tswana
tso ts - Tsonga
tuk tk - Turkmen
tum - - Tumbuka
tur tr - Turkish;Türkçe;Turkce
twi tw - Twi
tzm - - Central Atlas Tamazight
uig ug - Uighur
ukr uk - Ukrainian
umb - - Umbundu
urd ur - Urdu
uzb uz - Uzbek
uzn uz - Northern Uzbek
vec - - Venetian
ven ve - Venda
vie vi - Vietnamese
vol vo - Volapük
war - - Waray
wln wa - Walloon
wol wo - Wolof
xho xh - Xhosa
ydd yi - Eastern Yiddish
yid yi - Yiddish
yor yo - Yoruba
yue zh - Yue Chinese
zha za - Zhuang
zho zh chi Chinese
zsm ms - Standard Malay
zul zu - Zulu
"""
