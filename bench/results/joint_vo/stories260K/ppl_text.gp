set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/joint_vo/stories260K/ppl_text.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (text)'
set title 'stories260K'
plot 4.007604495867625 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 9.242418941510744
40 32.28465789277591
e
